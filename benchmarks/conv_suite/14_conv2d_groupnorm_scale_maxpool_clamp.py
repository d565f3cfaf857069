"""Conv2d (3x3, no padding), GroupNorm (16 groups, affine), a learned per-channel scale, 4x4 max pooling, then a
clamp to [0, 1.5]."""
import torch
from torch import nn
from torch.nn import functional as F

batch_size = 64
in_channels = 32
out_channels = 64
height = 128
width = 128
kernel_size = 3
num_groups = 16
pool_size = 4


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups, pool_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(num_groups, out_channels)
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(out_channels, 1, 1))
        self.pool_size = pool_size
        with torch.no_grad():  # not the identity affine of a fresh GroupNorm
            self.norm.weight.add_(0.1 * torch.randn(out_channels))
            self.norm.bias.add_(0.1 * torch.randn(out_channels))

    def forward(self, x):
        y = self.norm(self.conv(x)) * self.scale
        return torch.clamp(F.max_pool2d(y, self.pool_size), 0.0, 1.5)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups, pool_size]
