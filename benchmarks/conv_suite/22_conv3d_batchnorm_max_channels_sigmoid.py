"""Conv3d (3x3x3, stride 1, same padding) into BatchNorm3d in training mode, the maximum over its output channels
(kept as one), then sigmoid."""
import torch
from torch import nn

batch_size = 16
in_channels = 32
out_channels = 64
depth = 16
height = 64
width = 64
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, stride=1, padding=kernel_size // 2)
        self.norm = nn.BatchNorm3d(out_channels)

    def forward(self, x):
        y = torch.amax(self.norm(self.conv(x)), dim=1, keepdim=True)
        return torch.sigmoid(y)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
