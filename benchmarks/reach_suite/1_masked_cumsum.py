"""A running total of the readings a validity mask keeps, along each row (1.1 GB moved per call)."""
import torch
from torch import nn

rows = 4096
length = 32768


class Model(nn.Module):
    def forward(self, readings, valid):
        return torch.cumsum(readings * valid, dim=1)


def get_inputs():
    return [torch.randn(rows, length), torch.rand(rows, length) > 0.25]


def get_init_inputs():
    return []
