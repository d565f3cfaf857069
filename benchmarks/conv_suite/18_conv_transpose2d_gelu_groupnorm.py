"""ConvTranspose2d (3x3, stride 1, no padding: two wider), erf-GELU, then GroupNorm (16 groups, affine)."""
import torch
from torch import nn
from torch.nn import functional as F

batch_size = 128
in_channels = 32
out_channels = 64
height = 96
width = 96
kernel_size = 3
num_groups = 16


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size)
        self.norm = nn.GroupNorm(num_groups, out_channels)
        with torch.no_grad():  # not the identity affine of a fresh GroupNorm
            self.norm.weight.add_(0.1 * torch.randn(out_channels))
            self.norm.bias.add_(0.1 * torch.randn(out_channels))

    def forward(self, x):
        return self.norm(F.gelu(self.deconv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
