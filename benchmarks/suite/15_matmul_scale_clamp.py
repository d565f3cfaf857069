"""Plain matmul of two input matrices, scaled and clamped: y = clamp(a @ b * alpha, min_val, max_val)."""
import torch
from torch import nn

# Estimated H200 fp32 eager time ~3.0 ms (>= 0.5 ms): mm 2*16384*1024*4096 = 137 GFLOP at ~50 TFLOP/s
# = 2.75 ms; scale and clamp, 2 read+write passes over the 16384x4096 output (2 * 537 MB) at ~4 TB/s = 0.27 ms.
# Memory: a 67 MB, b 17 MB, output and two intermediates 268 MB each: ~0.9 GB.
batch_size = 16384
in_features = 1024
out_features = 4096
alpha = in_features ** -0.5
min_val = -1.5
max_val = 1.5


class Model(nn.Module):
    def __init__(self, alpha, min_val, max_val):
        super().__init__()
        self.alpha, self.min_val, self.max_val = alpha, min_val, max_val

    def forward(self, a, b):
        return torch.clamp(torch.matmul(a, b) * self.alpha, self.min_val, self.max_val)


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(in_features, out_features)]


def get_init_inputs():
    return [alpha, min_val, max_val]
