"""The gate of a SwiGLU MLP: silu(x @ W_gate^T) * (x @ W_up^T), two bias-free projections of one input."""
import torch
import torch.nn as nn
import torch.nn.functional as F

tokens = 4096
hidden = 2048
intermediate = 5632


class Model(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)

    def forward(self, x):
        return F.silu(self.gate(x)) * self.up(x)


def get_inputs():
    return [torch.randn(tokens, hidden)]


def get_init_inputs():
    return [hidden, intermediate]
