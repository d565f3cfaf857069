"""A 3x3 convolution (same padding) followed by GroupNorm: normalising by a group's deviation scales the
convolution's rounding error up with it."""
import torch
from torch import nn

batch_size = 2
in_channels = 32
out_channels = 32
size = 16
groups = 4


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        return self.norm(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
