"""A classifier head's pooling: per-channel bias, exact GELU, then the global average over H and W: (N, C)."""
import torch
import torch.nn.functional as F
from torch import nn

# Estimated H200 fp32 eager time ~0.64 ms (>= 0.5 ms): memory-bound over 80x512x56x56 (514 MB): the bias add and
# GELU each read and write it (4 * 514 MB), the mean reads it once more: 2.57 GB at ~4 TB/s = 0.64 ms; the
# output is 80x512 (0.16 MB). Memory: input and two 514 MB intermediates: ~1.55 GB.
batch_size = 80
in_channels = 512
height = 56
width = 56


class Model(nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(in_channels, 1, 1) * 0.5)

    def forward(self, x):
        return F.gelu(x + self.bias).mean(dim=(2, 3))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels]
