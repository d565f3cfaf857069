"""Conv3d (3x3x3, same padding), InstanceNorm3d (affine) over each sample's channels, then LeakyReLU."""
import torch
import torch.nn.functional as F
from torch import nn

# Estimated H200 eager time ~1.0 ms (>= 0.5 ms): conv 2*8*32*64*64*64*32*27 = 116 GFLOP at ~200 TFLOP/s (cuDNN
# TF32) = 0.58 ms, plus reading its 268 MB input and writing its 268 MB output at ~4 TB/s = 0.13 ms;
# InstanceNorm (a statistics read, then read+write) and LeakyReLU (read+write) over 8x32x64x64x64 (268 MB)
# = 1.34 GB = 0.34 ms. Memory: input and three activations of 268 MB each: ~1.1 GB.
batch_size = 8
in_channels = 32
out_channels = 32
depth = 64
height = 64
width = 64
kernel_size = 3
padding = 1
negative_slope = 0.1


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding, negative_slope):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=padding)
        self.norm = nn.InstanceNorm3d(out_channels, affine=True)
        with torch.no_grad():  # not the identity affine of a fresh InstanceNorm
            self.norm.weight.add_(0.1 * torch.randn(out_channels))
            self.norm.bias.add_(0.1 * torch.randn(out_channels))
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(self.norm(self.conv(x)), self.negative_slope)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding, negative_slope]
