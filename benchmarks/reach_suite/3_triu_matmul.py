"""Scores of every pair (i, j) with j >= i: a product kept above the diagonal and scaled (1.1 TFLOP, 0.8 GB)."""
import torch
from torch import nn

n = 8192


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, queries, keys):
        return torch.triu(queries @ keys.T) * self.scale


def get_inputs():
    return [torch.randn(n, n), torch.randn(n, n)]


def get_init_inputs():
    return [0.125]
