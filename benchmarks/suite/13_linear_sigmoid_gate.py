"""Linear with bias gated by a second input: y = (x @ W^T + b) * sigmoid(gate), with a wide N."""
import torch
from torch import nn

# Estimated H200 fp32 eager time ~2.9 ms (>= 0.5 ms): addmm 2*4096*2048*8192 = 137 GFLOP at ~50 TFLOP/s
# = 2.75 ms; sigmoid (read+write) and the product (2 reads + write) over 4096x8192 (134 MB each) = 671 MB at
# ~4 TB/s = 0.17 ms. Memory: x 34 MB, W 67 MB, gate, output and two intermediates 134 MB each: ~0.65 GB.
batch_size = 4096
in_features = 2048
out_features = 8192


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x, gate):
        return self.linear(x) * torch.sigmoid(gate)


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features]
