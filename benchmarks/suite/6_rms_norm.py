"""RMSNorm over the last dim of a 2-D tensor with a learned weight: y = x / sqrt(mean(x^2) + eps) * w."""
import torch
import torch.nn as nn

batch_size = 8192
dim = 4096
eps = 1e-6


class Model(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, eps]
