"""Attention probabilities: softmax(q @ k^T * scale) over the keys, for a batch of heads (no masking)."""
import torch
import torch.nn as nn

batch_heads = 64
seq_len = 512
head_dim = 64


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = head_dim ** -0.5

    def forward(self, q, k):
        return torch.softmax(torch.bmm(q, k.transpose(1, 2)) * self.scale, dim=-1)


def get_inputs():
    return [torch.randn(batch_heads, seq_len, head_dim), torch.randn(batch_heads, seq_len, head_dim)]


def get_init_inputs():
    return [head_dim]
