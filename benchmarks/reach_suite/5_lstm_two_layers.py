"""A two-layer LSTM over 64 steps, batch first; the second layer's outputs and the final states."""
import torch
from torch import nn

batch_size = 128
steps = 64
features = 512
hidden = 1024


class Model(nn.Module):
    def __init__(self, features, hidden):
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)

    def forward(self, x):
        out, (h_n, c_n) = self.lstm(x)
        return out, h_n, c_n


def get_inputs():
    return [torch.randn(batch_size, steps, features)]


def get_init_inputs():
    return [features, hidden]
