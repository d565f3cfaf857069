"""Conv2d (5x5, same padding), InstanceNorm2d (no affine), then erf-GELU."""
import torch
from torch import nn
from torch.nn import functional as F

batch_size = 32
in_channels = 64
out_channels = 128
height = 96
width = 96
kernel_size = 5


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = nn.InstanceNorm2d(out_channels)

    def forward(self, x):
        return F.gelu(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
