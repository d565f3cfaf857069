"""Conv2d (3x3, same padding), softmax over the output channels, then a learned per-channel scale."""
import torch
from torch import nn

batch_size = 64
in_channels = 64
out_channels = 64
height = 96
width = 96
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = nn.Parameter(1.0 + 0.1 * torch.randn(1, out_channels, 1, 1))

    def forward(self, x):
        return torch.softmax(self.conv(x), dim=1) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
