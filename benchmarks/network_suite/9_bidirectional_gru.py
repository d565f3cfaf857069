"""A six-layer bidirectional GRU (nn.GRU, sequence first, zero initial state) over 512 steps; the forward returns
the last layer's output at every step, both directions concatenated (steps, batch, 2 * hidden_size)."""
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
        self.gru = nn.GRU(input_size, hidden_size, num_layers, bidirectional=True)

    def forward(self, x):
        output, _ = self.gru(x)
        return output


def get_inputs():
    return [torch.randn(steps, batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_layers]
