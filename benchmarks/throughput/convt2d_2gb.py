"""A ConvTranspose2d doubling a 256x256 map: its fp32 output is 32x64x512x512 (2.1 GB)."""
import torch
import torch.nn as nn

batch_size = 32
in_channels = 32
out_channels = 64
size = 256


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1)

    def forward(self, x):
        return self.deconv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels]
