"""A Transformer encoder block: nn.TransformerEncoderLayer (pre-norm, batch first, GELU MLP of 4 x d_model,
dropout 0.0): x + self-attention(LayerNorm(x)), then + MLP(LayerNorm(.)). As constructed (training mode) it
takes PyTorch's plain path, not the fused inference fast path."""
import torch
from torch import nn

batch_size = 16
seq_len = 512
d_model = 768
n_head = 12


class Model(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, n_head, dim_feedforward=4 * d_model, dropout=0.0,
                                                activation="gelu", batch_first=True, norm_first=True)

    def forward(self, x):
        return self.layer(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, n_head]
