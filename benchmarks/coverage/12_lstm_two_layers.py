"""A two-layer LSTM over a sequence; the last layer's outputs."""
import torch
from torch import nn

batch_size = 64
steps = 64
input_size = 128
hidden_size = 256


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=2, batch_first=True)

    def forward(self, x):
        out, _ = self.lstm(x)
        return out


def get_inputs():
    return [torch.randn(batch_size, steps, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
