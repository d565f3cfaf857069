"""Conv3d (3x3x3, no padding), logsumexp over the output channels, then ReLU."""
import torch
from torch import nn

batch_size = 32
in_channels = 32
out_channels = 64
depth = 16
height = 48
width = 48
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return torch.relu(torch.logsumexp(self.conv(x), dim=1, keepdim=True))


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
