"""Linear with bias, ReLU, then a residual input added: y = relu(x @ W^T + b) + residual."""
import torch
from torch import nn

# Estimated H200 fp32 eager time ~1.45 ms (>= 0.5 ms): addmm 2*8192*2048*2048 = 68.7 GFLOP at ~50 TFLOP/s
# = 1.37 ms; ReLU (read+write) and the add (2 reads + write) over 8192x2048 (67 MB each) = 335 MB at ~4 TB/s
# = 0.08 ms. Memory: x, residual, output, one intermediate 67 MB each, W 17 MB: ~0.3 GB.
batch_size = 8192
in_features = 2048
out_features = 2048


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x, residual):
        return torch.relu(self.linear(x)) + residual


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features]
