"""A reversed cumulative sum (suffix sums) along the last dimension."""
import torch
from torch import nn

batch_size = 256
length = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.flip(torch.cumsum(torch.flip(x, dims=[-1]), dim=-1), dims=[-1])


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return []
