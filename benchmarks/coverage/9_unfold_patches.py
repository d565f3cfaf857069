"""Non-overlapping 4x4 patches of an image (Tensor.unfold twice), averaged per patch."""
import torch
from torch import nn

batch_size = 64
channels = 32
size = 256


class Model(nn.Module):
    def forward(self, x):
        patches = x.unfold(2, 4, 4).unfold(3, 4, 4)
        return patches.mean(dim=(-1, -2))


def get_inputs():
    return [torch.randn(batch_size, channels, size, size)]


def get_init_inputs():
    return []
