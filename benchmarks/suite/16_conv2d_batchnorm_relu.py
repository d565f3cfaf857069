"""Conv2d (3x3, same padding) followed by BatchNorm2d with batch statistics (training mode) and ReLU."""
import torch
from torch import nn

# Estimated H200 eager time ~0.95 ms (>= 0.5 ms): conv 2*48*128*112*112*64*9 = 88.8 GFLOP at ~200 TFLOP/s (cuDNN
# TF32) = 0.44 ms, plus reading its 154 MB input and writing its 308 MB output at ~4 TB/s = 0.12 ms; BatchNorm
# (a statistics read, then read+write) and ReLU (read+write) over 48x128x112x112 (308 MB) = 1.54 GB = 0.39 ms.
# Memory: input 154 MB, three 308 MB activations: ~1.1 GB.
batch_size = 48
in_channels = 64
out_channels = 128
height = 112
width = 112
kernel_size = 3
padding = 1


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding]
