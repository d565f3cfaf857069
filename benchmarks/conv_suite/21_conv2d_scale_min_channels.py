"""Conv2d (3x3, no padding), scaled by a constant, then the minimum over its output channels (kept as one)."""
import torch
from torch import nn

batch_size = 128
in_channels = 16
out_channels = 64
height = 128
width = 128
kernel_size = 3
scale = 1.75


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.scale = scale

    def forward(self, x):
        return torch.amin(self.conv(x) * self.scale, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale]
