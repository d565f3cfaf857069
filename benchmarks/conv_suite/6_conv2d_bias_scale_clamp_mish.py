"""Conv2d (3x3, stride 1, no padding) then a pointwise chain: a learned bias, a scale, a clamp and Mish."""
import torch
from torch import nn
from torch.nn import functional as F

batch_size = 128
in_channels = 32
out_channels = 64
height = 64
width = 64
kernel_size = 3
scale = 1.5


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(0.1 * torch.randn(1, out_channels, 1, 1))
        self.scale = scale

    def forward(self, x):
        y = (self.conv(x) + self.bias) * self.scale
        return F.mish(torch.clamp(y, -2.0, 2.0))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, scale]
