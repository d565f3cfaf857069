"""Strided Conv2d (3x3, stride 2: 2x downsampling) followed by hardswish."""
import torch
import torch.nn.functional as F
from torch import nn

# Estimated H200 eager time ~0.9 ms (>= 0.5 ms): conv 2*32*256*80*80*128*9 = 121 GFLOP at ~200 TFLOP/s (cuDNN
# TF32) = 0.6 ms, plus reading its 419 MB input and writing its 210 MB output at ~4 TB/s = 0.16 ms; hardswish
# (read+write) over 32x256x80x80 (210 MB) = 419 MB = 0.1 ms. Memory: input 419 MB, two 210 MB activations:
# ~0.85 GB.
batch_size = 32
in_channels = 128
out_channels = 256
height = 160
width = 160
kernel_size = 3
stride = 2
padding = 1


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return F.hardswish(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding]
