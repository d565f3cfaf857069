"""LayerNorm over the last dim of a 2-D tensor, with affine weight and bias."""
import torch
import torch.nn as nn

batch_size = 16384
dim = 4096
eps = 1e-5


class Model(nn.Module):
    def __init__(self, normalized_shape, eps):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape, eps=eps)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, eps]
