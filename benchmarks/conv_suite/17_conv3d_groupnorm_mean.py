"""Conv3d (3x3x3, same padding), GroupNorm (8 groups, affine), then the mean over every dimension but the batch:
one value per sample."""
import torch
from torch import nn

batch_size = 32
in_channels = 32
out_channels = 64
depth = 16
height = 48
width = 48
kernel_size = 3
num_groups = 8


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = nn.GroupNorm(num_groups, out_channels)
        with torch.no_grad():  # not the identity affine of a fresh GroupNorm (whose mean would be 0)
            self.norm.weight.add_(0.1 * torch.randn(out_channels))
            self.norm.bias.add_(0.1 * torch.randn(out_channels))

    def forward(self, x):
        y = self.norm(self.conv(x))
        return y.mean(dim=(1, 2, 3, 4))


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
