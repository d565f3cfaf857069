"""Depthwise Conv2d (5x5, same padding, one group per channel), GroupNorm (16 groups, affine), then SiLU."""
import torch
from torch import nn
from torch.nn import functional as F

batch_size = 64
channels = 64
height = 128
width = 128
kernel_size = 5
num_groups = 16


class Model(nn.Module):
    def __init__(self, channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)
        self.norm = nn.GroupNorm(num_groups, channels)
        with torch.no_grad():  # not the identity affine of a fresh GroupNorm
            self.norm.weight.add_(0.1 * torch.randn(channels))
            self.norm.bias.add_(0.1 * torch.randn(channels))

    def forward(self, x):
        return F.silu(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size, num_groups]
