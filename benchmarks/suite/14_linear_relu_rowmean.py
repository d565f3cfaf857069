"""Linear with bias, ReLU, then the mean of every row: y = relu(x @ W^T + b).mean(dim=1), one value per row."""
import torch
from torch import nn

# Estimated H200 fp32 eager time ~1.45 ms (>= 0.5 ms): addmm 2*16384*1024*2048 = 68.7 GFLOP at ~50 TFLOP/s
# = 1.37 ms; ReLU (read+write) and the row mean (read) over 16384x2048 (134 MB) = 403 MB at ~4 TB/s = 0.1 ms.
# Memory: x 67 MB, W 8 MB, two 134 MB intermediates: ~0.35 GB.
batch_size = 16384
in_features = 1024
out_features = 2048


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x)).mean(dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
