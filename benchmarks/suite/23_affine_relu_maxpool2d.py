"""A ResNet stem's tail: frozen batch-norm (per-channel scale and shift), ReLU, then MaxPool2d 3x3 stride 2."""
import torch
from torch import nn

# Estimated H200 fp32 eager time ~0.74 ms (>= 0.5 ms): memory-bound over 128x64x112x112 (411 MB): the scale, the
# shift and ReLU each read and write it (6 * 411 MB), the pool reads it and writes 128x64x56x56 (103 MB):
# 2.98 GB at ~4 TB/s = 0.74 ms. Memory: input and three 411 MB intermediates, output 103 MB: ~1.75 GB.
batch_size = 128
in_channels = 64
height = 112
width = 112
kernel_size = 3
stride = 2
padding = 1


class Model(nn.Module):
    def __init__(self, in_channels, kernel_size, stride, padding):
        super().__init__()
        # frozen statistics folded into an affine map, as detection backbones keep them
        self.register_buffer("scale", 1.0 + 0.2 * torch.randn(in_channels, 1, 1))
        self.register_buffer("shift", 0.2 * torch.randn(in_channels, 1, 1))
        self.pool = nn.MaxPool2d(kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(torch.relu(x * self.scale + self.shift))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, kernel_size, stride, padding]
