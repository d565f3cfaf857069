"""A MinGPT-style causal self-attention layer: one Linear (c_attn) makes queries, keys and values, split with
`.split(n_embd, dim=2)` and reshaped into heads; scores scaled by 1/sqrt(head size), masked above the diagonal
by a registered lower-triangular buffer (masked_fill with -inf), softmax, attention dropout with p = 0, the
weighted values merged back and projected by c_proj."""
import math

import torch
from torch import nn

batch_size = 16
seq_len = 512
n_embd = 768
n_head = 12
block_size = 1024


class Model(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_embd, self.n_head = n_embd, n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_drop = nn.Dropout(0.0)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_drop(torch.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd)]


def get_init_inputs():
    return [n_embd, n_head, block_size]
