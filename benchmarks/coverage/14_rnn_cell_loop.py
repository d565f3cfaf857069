"""An Elman RNN written as a Python loop over time steps with an nn.RNNCell (a recurrent forward)."""
import torch
from torch import nn

batch_size = 64
steps = 16
input_size = 128
hidden_size = 128


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.cell = nn.RNNCell(input_size, hidden_size)
        self.hidden_size = hidden_size

    def forward(self, x):
        h = torch.zeros(x.shape[1], self.hidden_size, device=x.device, dtype=x.dtype)
        for t in range(x.shape[0]):
            h = self.cell(x[t], h)
        return h


def get_inputs():
    return [torch.randn(steps, batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
