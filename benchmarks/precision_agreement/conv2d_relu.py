"""A 3x3 convolution (same padding) and a ReLU: on a GPU the reference's convolution runs in TF32 (cuDNN)."""
import torch
from torch import nn

batch_size = 2
in_channels = 32
out_channels = 32
size = 16


class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels]
