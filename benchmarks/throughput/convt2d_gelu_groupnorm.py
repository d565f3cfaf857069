"""A ConvTranspose2d (2.1 GB output), GELU, then GroupNorm over 8 groups."""
import torch
import torch.nn as nn

batch_size = 32
in_channels = 32
out_channels = 64
size = 256
groups = 8


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        return self.norm(torch.nn.functional.gelu(self.deconv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels, groups]
