"""ConvTranspose2d (3x3, stride 2: twice the size) into BatchNorm2d in training mode, then tanh."""
import torch
from torch import nn

batch_size = 64
in_channels = 64
out_channels = 32
height = 64
width = 64
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=2, padding=1,
                                         output_padding=1)
        self.norm = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        return torch.tanh(self.norm(self.deconv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
