"""Depthwise Conv2d (3x3, groups = channels), BatchNorm2d with batch statistics (training mode), then ReLU6."""
import torch
import torch.nn.functional as F
from torch import nn

# Estimated H200 eager time ~0.54 ms (>= 0.5 ms): memory-bound (2*32*192*112*112*9 = 1.4 GFLOP is nothing): over
# 32x192x112x112 (308 MB) the conv reads and writes (2 passes), BatchNorm reads for its statistics then reads
# and writes (3), ReLU6 reads and writes (2): 7 * 308 MB = 2.16 GB at ~4 TB/s = 0.54 ms (cuDNN's depthwise
# kernels seldom reach full bandwidth: likely more). Memory: input and three activations of 308 MB: ~1.2 GB.
batch_size = 32
in_channels = 192
height = 112
width = 112
kernel_size = 3
padding = 1


class Model(nn.Module):
    def __init__(self, in_channels, kernel_size, padding):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, in_channels, kernel_size, padding=padding, groups=in_channels)
        self.bn = nn.BatchNorm2d(in_channels)

    def forward(self, x):
        return F.relu6(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, kernel_size, padding]
