"""A vanilla RNN written as a Python loop over the time steps: at each step the input and the hidden state are
concatenated, a Linear and tanh give the new hidden state, and a second Linear gives the step's output. The
hidden state starts at zero; the forward returns every step's output, stacked (steps, batch, output_size)."""
import torch
from torch import nn

batch_size = 10
steps = 256
input_size = 1024
hidden_size = 256
output_size = 128


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.hidden_size = hidden_size
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)

    def forward(self, x):
        hidden = torch.zeros(x.shape[1], self.hidden_size, device=x.device, dtype=x.dtype)
        outputs = []
        for t in range(x.shape[0]):
            hidden = torch.tanh(self.i2h(torch.cat([x[t], hidden], dim=1)))
            outputs.append(self.h2o(hidden))
        return torch.stack(outputs)


def get_inputs():
    return [torch.randn(steps, batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, output_size]
