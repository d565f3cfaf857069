"""The lower triangle (below the first superdiagonal) of a batch of matrices, scaled."""
import torch
from torch import nn

batch_size = 32
n = 1024


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.tril(x, diagonal=1) * self.scale


def get_inputs():
    return [torch.randn(batch_size, n, n)]


def get_init_inputs():
    return [0.5]
