"""A learned per-channel bias broadcast over the map, SiLU, then AvgPool2d 2x2 (downsampling)."""
import torch
import torch.nn.functional as F
from torch import nn

# Estimated H200 fp32 eager time ~0.67 ms (>= 0.5 ms): memory-bound over 64x96x144x144 (509 MB): the bias add and
# SiLU each read and write it (4 * 509 MB), the pool reads it and writes 64x96x72x72 (127 MB): 2.67 GB at
# ~4 TB/s = 0.67 ms. Memory: input and two 509 MB intermediates, output 127 MB: ~1.65 GB.
batch_size = 64
in_channels = 96
height = 144
width = 144
kernel_size = 2


class Model(nn.Module):
    def __init__(self, in_channels, kernel_size):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(in_channels, 1, 1) * 0.5)
        self.pool = nn.AvgPool2d(kernel_size)

    def forward(self, x):
        return self.pool(F.silu(x + self.bias))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, kernel_size]
