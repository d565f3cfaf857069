"""Adds noise drawn inside forward, scaled to zero: the output is x, but the forward calls randn."""
import torch
from torch import nn

batch_size = 256
features = 4096


class Model(nn.Module):
    def forward(self, x):
        noise = torch.randn_like(x)
        return x + 0.0 * noise


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return []
