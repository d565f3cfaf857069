"""ConvTranspose3d (3x3x3, stride 1, padding 1), softmax over the output channels, then doubled."""
import torch
from torch import nn

batch_size = 32
in_channels = 64
out_channels = 32
depth = 16
height = 48
width = 48
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.deconv = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        return 2.0 * torch.softmax(self.deconv(x), dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
