"""Batched matmul of two inputs, a learned bias broadcast over the last dim, then tanh: tanh(bmm(x, w) + b)."""
import torch
from torch import nn

# Estimated H200 fp32 eager time ~1.5 ms (>= 0.5 ms): bmm 2*32*1024*1024*1024 = 68.7 GFLOP at ~50 TFLOP/s
# = 1.37 ms; bias add and tanh, 2 read+write passes over the 32x1024x1024 output (2 * 268 MB) at ~4 TB/s
# = 0.13 ms. Memory: x, w, output, one intermediate 134 MB each: ~0.55 GB.
batch_size = 32
seq_len = 1024
in_features = 1024
out_features = 1024


class Model(nn.Module):
    def __init__(self, out_features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)

    def forward(self, x, w):
        return torch.tanh(torch.bmm(x, w) + self.bias)


def get_inputs():
    # w scaled so that the products stay O(1) and tanh does not saturate everywhere
    return [torch.randn(batch_size, seq_len, in_features),
            torch.randn(batch_size, in_features, out_features) * in_features ** -0.5]


def get_init_inputs():
    return [out_features]
