"""Linear, minus a constant, times a constant, then ReLU."""
import torch
from torch import nn

batch_size = 1024
in_features = 8192
out_features = 8192
shift = 0.25
factor = 1.75


class Model(nn.Module):
    def __init__(self, in_features, out_features, shift, factor):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.shift = shift
        self.factor = factor

    def forward(self, x):
        return torch.relu((self.linear(x) - self.shift) * self.factor)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, shift, factor]
