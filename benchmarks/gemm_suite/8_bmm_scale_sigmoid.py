"""A batched product of two inputs, a constant scale, then a sigmoid."""
import torch
from torch import nn

batch = 16
m = 1024
k = 2048
n = 2048
scale = 0.05


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b):
        return torch.sigmoid(torch.bmm(a, b) * self.scale)


def get_inputs():
    return [torch.randn(batch, m, k), torch.randn(batch, k, n)]


def get_init_inputs():
    return [scale]
