"""ConvTranspose2d (4x4, stride 2, padding 1: twice the size), minus a learned per-channel bias, then tanh."""
import torch
from torch import nn

batch_size = 64
in_channels = 32
out_channels = 64
height = 64
width = 64
kernel_size = 4


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=2, padding=1)
        self.bias = nn.Parameter(0.2 * torch.randn(out_channels, 1, 1))

    def forward(self, x):
        return torch.tanh(self.deconv(x) - self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
