"""Pointwise chain: y = clamp(gelu_tanh(x * scale + shift), min_val, max_val)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
dim = 16384
scale = 1.5
shift = -0.25
min_val = -0.5
max_val = 2.0


class Model(nn.Module):
    def __init__(self, scale, shift, min_val, max_val):
        super().__init__()
        self.scale, self.shift = scale, shift
        self.min_val, self.max_val = min_val, max_val

    def forward(self, x):
        x = x * self.scale + self.shift
        x = F.gelu(x, approximate="tanh")
        return torch.clamp(x, self.min_val, self.max_val)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale, shift, min_val, max_val]
