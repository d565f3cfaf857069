"""ConvTranspose2d, add a constant, a minimum with a constant, GELU, multiply (reconstructed from a crash report)."""
import torch
from torch import nn

batch_size = 32
in_channels = 32
out_channels = 16
size = 64


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, add_value, multiply_value):
        super().__init__()
        self.conv_t = nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2)
        self.add_value, self.multiply_value = add_value, multiply_value

    def forward(self, x):
        x = self.conv_t(x) + self.add_value
        x = torch.min(x, torch.tensor(0.0, device=x.device))
        x = torch.nn.functional.gelu(x)
        return x * self.multiply_value


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size)]


def get_init_inputs():
    return [in_channels, out_channels, 0.5, 2.0]
