"""Two convolution branches of one input (3x3 and 1x1) joined along the channels, then ReLU (0.8 GB moved)."""
import torch
from torch import nn

batch_size = 64
channels = 64
branch_channels = 64
size = 128


class Model(nn.Module):
    def __init__(self, channels, branch_channels):
        super().__init__()
        self.wide = nn.Conv2d(channels, branch_channels, 3, padding=1)
        self.narrow = nn.Conv2d(channels, branch_channels, 1)

    def forward(self, x):
        return torch.relu(torch.cat([self.wide(x), self.narrow(x)], dim=1))


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return [channels, branch_channels]
