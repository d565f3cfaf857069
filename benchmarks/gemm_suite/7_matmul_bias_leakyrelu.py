"""A product of two inputs (the second K x N, row-major), plus a learned bias, then LeakyReLU."""
import torch
import torch.nn.functional as F
from torch import nn

m = 2048
k = 4096
n = 8192


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n) * 0.1)

    def forward(self, a, b):
        return F.leaky_relu(a @ b + self.bias, 0.05)


def get_inputs():
    return [torch.randn(m, k), torch.randn(k, n)]


def get_init_inputs():
    return [n]
