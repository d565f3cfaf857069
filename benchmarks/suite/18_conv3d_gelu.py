"""Conv3d (3x3x3, same padding) on a volume followed by exact (erf) GELU."""
import torch
import torch.nn.functional as F
from torch import nn

# Estimated H200 eager time ~0.8 ms (>= 0.5 ms): conv 2*8*64*32*64*64*32*27 = 116 GFLOP at ~200 TFLOP/s (cuDNN
# TF32) = 0.58 ms, plus reading its 134 MB input and writing its 268 MB output at ~4 TB/s = 0.1 ms; GELU
# (read+write) over 8x64x32x64x64 (268 MB) = 537 MB = 0.13 ms. Memory: input 134 MB, two 268 MB activations:
# ~0.7 GB.
batch_size = 8
in_channels = 32
out_channels = 64
depth = 32
height = 64
width = 64
kernel_size = 3
padding = 1


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=padding)

    def forward(self, x):
        return F.gelu(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]
