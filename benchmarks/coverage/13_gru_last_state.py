"""A one-layer GRU; the final hidden state."""
import torch
from torch import nn

batch_size = 64
steps = 32
input_size = 128
hidden_size = 128


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size)

    def forward(self, x):
        _, h = self.gru(x)
        return h


def get_inputs():
    return [torch.randn(steps, batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
