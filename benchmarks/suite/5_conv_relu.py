"""Conv2d (with bias, stride 1, zero padding) followed by ReLU and adding a constant offset."""
import torch
import torch.nn as nn

batch_size = 32
in_channels = 64
out_channels = 128
height = 128
width = 128
kernel_size = 3
padding = 1
offset = 0.1


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, padding, offset):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)
        self.offset = offset

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.offset


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding, offset]
