"""Survival-style discounting: for each step, the product of the factors after it (a reversed exclusive
cumulative product), written with flips and a shift as models write it (0.5 GB moved per call)."""
import torch
from torch import nn

rows = 4096
length = 16384


class Model(nn.Module):
    def forward(self, factors):
        backwards = torch.cumprod(torch.flip(factors, dims=[1]), dim=1)
        shifted = torch.cat([torch.ones_like(backwards[:, :1]), backwards[:, :-1]], dim=1)
        return torch.flip(shifted, dims=[1])


def get_inputs():
    # factors near 1 keep the products finite over the whole row
    return [1.0 + 0.0005 * torch.randn(rows, length)]


def get_init_inputs():
    return []
