"""A Conv2d whose output is reduced over its channels (minimum) and squashed twice (tanh)."""
import torch
import torch.nn as nn

batch_size = 32
in_channels = 32
out_channels = 64
size = 256
kernel = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel)

    def forward(self, x):
        y = torch.min(self.conv(x), dim=1, keepdim=True)[0]
        return torch.tanh(torch.tanh(y))


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels, kernel]
