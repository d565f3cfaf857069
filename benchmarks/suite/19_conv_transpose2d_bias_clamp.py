"""ConvTranspose2d (4x4, stride 2: 2x upsampling), plus a learned per-channel bias, then a clamp."""
import torch
from torch import nn

# Estimated H200 eager time ~0.83 ms (>= 0.5 ms): transposed conv 2*12*128*160*160*64*16 = 80.5 GFLOP at
# ~200 TFLOP/s (cuDNN TF32) = 0.4 ms, plus reading its 157 MB input and writing its 315 MB output at ~4 TB/s
# = 0.12 ms; bias add and clamp, 2 read+write passes over 12x64x320x320 (2 * 629 MB) = 0.31 ms.
# Memory: input 157 MB, three 315 MB activations: ~1.1 GB.
batch_size = 12
in_channels = 128
out_channels = 64
height = 160
width = 160
kernel_size = 4
stride = 2
padding = 1
min_val = -0.5
max_val = 0.5


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, min_val, max_val):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)
        self.min_val, self.max_val = min_val, max_val

    def forward(self, x):
        return torch.clamp(self.deconv(x) + self.bias, self.min_val, self.max_val)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, min_val, max_val]
