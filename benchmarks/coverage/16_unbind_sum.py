"""Splits a stacked tensor into its slices (unbind) and combines them with weights."""
import torch
from torch import nn

batch_size = 128
features = 4096


class Model(nn.Module):
    def forward(self, x):
        a, b, c = torch.unbind(x, dim=0)
        return a * 0.5 + b * 0.25 - c


def get_inputs():
    return [torch.randn(3, batch_size, features)]


def get_init_inputs():
    return []
