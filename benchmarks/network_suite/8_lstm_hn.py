"""A six-layer LSTM (nn.LSTM, batch first, zero initial states) over 512 steps; the forward returns the last
hidden state of every layer, h_n (num_layers, batch, hidden_size)."""
import torch
from torch import nn

batch_size = 10
steps = 512
input_size = 128
hidden_size = 256
num_layers = 6


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)

    def forward(self, x):
        _, (h_n, _) = self.lstm(x)
        return h_n


def get_inputs():
    return [torch.randn(batch_size, steps, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_layers]
