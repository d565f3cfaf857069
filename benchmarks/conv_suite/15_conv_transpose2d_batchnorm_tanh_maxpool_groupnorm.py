"""ConvTranspose2d (3x3, stride 2: twice the size) into BatchNorm2d in training mode, tanh, 2x2 max pooling, then
GroupNorm (8 groups, affine)."""
import torch
from torch import nn
from torch.nn import functional as F

batch_size = 64
in_channels = 64
out_channels = 64
height = 64
width = 64
kernel_size = 3
num_groups = 8


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=2, padding=1,
                                         output_padding=1)
        self.batch_norm = nn.BatchNorm2d(out_channels)
        self.group_norm = nn.GroupNorm(num_groups, out_channels)
        with torch.no_grad():  # not the identity affine of a fresh GroupNorm
            self.group_norm.weight.add_(0.1 * torch.randn(out_channels))
            self.group_norm.bias.add_(0.1 * torch.randn(out_channels))

    def forward(self, x):
        y = torch.tanh(self.batch_norm(self.deconv(x)))
        return self.group_norm(F.max_pool2d(y, 2))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]
