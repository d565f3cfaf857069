"""ConvTranspose3d (3x3x3, stride 2: twice the size), its sum over the output channels (kept as one channel) added
back to it, the result multiplied by the convolution's output, then that output added once more."""
import torch
from torch import nn

batch_size = 32
in_channels = 32
out_channels = 32
depth = 16
height = 24
width = 24
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.deconv = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=2, padding=1,
                                         output_padding=1)

    def forward(self, x):
        y = self.deconv(x)
        total = y.sum(dim=1, keepdim=True)
        z = (y + total) * y
        return z + y


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
