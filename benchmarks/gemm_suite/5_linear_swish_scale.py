"""Linear without bias, Swish (x * sigmoid(x)), then a constant scale."""
import torch
from torch import nn

batch_size = 4096
in_features = 4096
out_features = 4096
scale = 2.5


class Model(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.scale = scale

    def forward(self, x):
        y = self.linear(x)
        return y * torch.sigmoid(y) * self.scale


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
