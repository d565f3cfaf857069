"""Two convolution branches of the same input, concatenated along the channels, then ReLU."""
import torch
from torch import nn

batch_size = 32
in_channels = 32
out_channels = 64
size = 128


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.left = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.right = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, x):
        return torch.relu(torch.cat([self.left(x), self.right(x)], dim=1))


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels]
