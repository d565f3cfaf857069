"""Conv2d (3x3, same padding) followed by GroupNorm (8 groups, affine) over its output channels."""
import torch
from torch import nn

# Estimated H200 eager time ~0.8 ms (>= 0.5 ms): conv 2*24*128*160*160*64*9 = 90.6 GFLOP at ~200 TFLOP/s (cuDNN
# TF32) = 0.45 ms, plus reading its 157 MB input and writing its 315 MB output at ~4 TB/s = 0.12 ms; GroupNorm
# (a statistics read, then read+write) over 24x128x160x160 (315 MB) = 0.94 GB = 0.24 ms.
# Memory: input 157 MB, two 315 MB activations: ~0.8 GB.
batch_size = 24
in_channels = 64
out_channels = 128
height = 160
width = 160
kernel_size = 3
padding = 1
num_groups = 8  # must divide out_channels
eps = 1e-5


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding, num_groups, eps):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)
        self.norm = nn.GroupNorm(num_groups, out_channels, eps=eps)
        with torch.no_grad():  # not the identity affine of a fresh GroupNorm
            self.norm.weight.add_(0.1 * torch.randn(out_channels))
            self.norm.bias.add_(0.1 * torch.randn(out_channels))

    def forward(self, x):
        return self.norm(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding, num_groups, eps]
