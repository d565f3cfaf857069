"""ConvTranspose3d (3x3x3, stride 2: twice the size), InstanceNorm3d (no affine), then ReLU."""
import torch
from torch import nn

batch_size = 16
in_channels = 32
out_channels = 32
depth = 8
height = 32
width = 32
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.deconv = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=2, padding=1,
                                         output_padding=1)
        self.norm = nn.InstanceNorm3d(out_channels)

    def forward(self, x):
        return torch.relu(self.norm(self.deconv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
