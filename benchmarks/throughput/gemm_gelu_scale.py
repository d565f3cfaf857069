"""A 1024x8192x8192 GEMM with a bias, GELU and a scale after it (kfoundry's own throughput problem)."""
import torch
import torch.nn as nn

batch_size = 1024
in_features = 8192
out_features = 8192
scale = 0.75


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x)) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
