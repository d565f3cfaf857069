"""Conv3d (3x3x3, same padding), 2x2x2 average pooling, then a scale and tanh."""
import torch
from torch import nn
from torch.nn import functional as F

batch_size = 16
in_channels = 32
out_channels = 64
depth = 16
height = 64
width = 64
kernel_size = 3
scale = 0.75


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.scale = scale

    def forward(self, x):
        return torch.tanh(F.avg_pool3d(self.conv(x), 2) * self.scale)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale]
