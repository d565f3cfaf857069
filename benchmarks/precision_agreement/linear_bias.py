"""A Linear layer with a bias: one fp32 GEMM whose reduction is 1024 long."""
import torch
from torch import nn

batch_size = 128
in_features = 1024
out_features = 256


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.linear(x)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
