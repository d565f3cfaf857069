"""Weak problem: a global average pool of a large random map, a bias, logsumexp over the channels and a
scale, to (B, 1). Each channel's mean of H*W random values is nearly 0, so the output is, within the
tolerance, scale * logsumexp(bias): it barely depends on the input."""
import torch
import torch.nn as nn

batch_size = 64
channels = 64
height = 256
width = 256
scale = 0.01


class Model(nn.Module):
    def __init__(self, channels, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels))
        self.scale = scale

    def forward(self, x):
        pooled = x.mean(dim=(2, 3)) + self.bias
        return self.scale * torch.logsumexp(pooled, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, scale]
