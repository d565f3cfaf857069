"""Conv2d (3x3, no padding), InstanceNorm2d (affine), 2x2 average pooling, then ReLU."""
import torch
from torch import nn
from torch.nn import functional as F

batch_size = 64
in_channels = 32
out_channels = 64
height = 128
width = 128
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.InstanceNorm2d(out_channels, affine=True)
        with torch.no_grad():  # not the identity affine of a fresh InstanceNorm2d
            self.norm.weight.add_(0.1 * torch.randn(out_channels))
            self.norm.bias.add_(0.1 * torch.randn(out_channels))

    def forward(self, x):
        return torch.relu(F.avg_pool2d(self.norm(self.conv(x)), 2))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
