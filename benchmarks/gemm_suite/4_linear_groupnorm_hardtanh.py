"""Linear, GroupNorm over its features (32 groups), then Hardtanh."""
import torch
from torch import nn

batch_size = 1024
in_features = 8192
out_features = 8192
groups = 32


class Model(nn.Module):
    def __init__(self, in_features, out_features, groups):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.GroupNorm(groups, out_features)
        self.act = nn.Hardtanh(min_val=-1.5, max_val=1.5)

    def forward(self, x):
        return self.act(self.norm(self.linear(x)))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, groups]
