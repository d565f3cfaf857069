"""A ConvTranspose3d followed by a BatchNorm3d (training mode: batch statistics)."""
import torch
import torch.nn as nn

batch_size = 16
in_channels = 32
out_channels = 16
depth, height, width = 16, 64, 64


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.deconv = nn.ConvTranspose3d(in_channels, out_channels, 3, stride=2, padding=1, output_padding=1)
        self.norm = nn.BatchNorm3d(out_channels)

    def forward(self, x):
        return self.norm(self.deconv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
