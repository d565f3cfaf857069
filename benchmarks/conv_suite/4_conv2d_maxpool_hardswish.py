"""Conv2d (3x3, same padding), 2x2 max pooling, then hardswish."""
import torch
from torch import nn
from torch.nn import functional as F

batch_size = 64
in_channels = 32
out_channels = 96
height = 128
width = 128
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        return F.hardswish(F.max_pool2d(self.conv(x), 2))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
