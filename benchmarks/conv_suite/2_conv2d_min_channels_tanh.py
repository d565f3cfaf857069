"""Conv2d (5x5, no padding), the minimum over its output channels, then tanh twice."""
import torch
from torch import nn

batch_size = 64
in_channels = 32
out_channels = 64
height = 128
width = 128
kernel_size = 5


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        y = torch.amin(self.conv(x), dim=1, keepdim=True)
        return torch.tanh(torch.tanh(y))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
