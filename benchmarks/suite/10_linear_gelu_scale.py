"""Linear with bias, exact (erf) GELU, then a constant scale: y = gelu(x @ W^T + b) * scale, with a long K."""
import torch
import torch.nn.functional as F
from torch import nn

# Estimated H200 fp32 eager time ~2.8 ms (>= 0.5 ms): addmm 2*2048*8192*4096 = 137 GFLOP at ~50 TFLOP/s
# = 2.75 ms; GELU and scale, 2 read+write passes over the 2048x4096 output (2 * 67 MB) at ~4 TB/s = 0.03 ms.
# Memory: x 67 MB, W 134 MB, output and one intermediate 34 MB each: ~0.3 GB.
batch_size = 2048
in_features = 8192
out_features = 4096
scale = 1.7


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return F.gelu(self.linear(x)) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
