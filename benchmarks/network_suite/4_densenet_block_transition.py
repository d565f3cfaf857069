"""A DenseNet dense block and the transition after it: six dense layers (BatchNorm, ReLU, 1x1 conv to 4 x growth
channels, BatchNorm, ReLU, 3x3 conv to `growth` channels), each concatenating its new features to all earlier
ones, then a transition (BatchNorm, ReLU, 1x1 conv halving the channels, 2x2 average pool). Training mode:
BatchNorm uses batch statistics."""
import torch
from torch import nn

batch_size = 10
in_features = 32
growth = 32
num_layers = 6
height = 224
width = 224


class DenseLayer(nn.Module):
    def __init__(self, cin, growth):
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
                                  nn.BatchNorm2d(4 * growth), nn.ReLU(), nn.Conv2d(4 * growth, growth, 3, padding=1,
                                                                                   bias=False))

    def forward(self, x):
        return torch.cat([x, self.body(x)], dim=1)


class Model(nn.Module):
    def __init__(self, in_features, growth, num_layers):
        super().__init__()
        self.block = nn.Sequential(*(DenseLayer(in_features + i * growth, growth) for i in range(num_layers)))
        out = in_features + num_layers * growth
        self.transition = nn.Sequential(nn.BatchNorm2d(out), nn.ReLU(), nn.Conv2d(out, out // 2, 1, bias=False),
                                        nn.AvgPool2d(2, 2))

    def forward(self, x):
        return self.transition(self.block(x))


def get_inputs():
    return [torch.randn(batch_size, in_features, height, width)]


def get_init_inputs():
    return [in_features, growth, num_layers]
