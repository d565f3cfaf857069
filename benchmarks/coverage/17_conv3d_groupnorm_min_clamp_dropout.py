"""Conv3d, GroupNorm, a minimum with a constant, a clamp, then Dropout (reconstructed from a crash report)."""
import torch
from torch import nn

batch_size = 16
in_channels = 3
out_channels = 32
depth, height, width = 16, 32, 32
groups = 8


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, groups, min_value, max_value, p):
        super().__init__()
        self.conv = nn.Conv3d(in_channels, out_channels, 3)
        self.norm = nn.GroupNorm(groups, out_channels)
        self.dropout = nn.Dropout(p)
        self.min_value, self.max_value = min_value, max_value

    def forward(self, x):
        x = self.norm(self.conv(x))
        x = torch.min(x, torch.tensor(self.min_value, device=x.device))
        x = torch.clamp(x, min=-self.max_value, max=self.max_value)
        return self.dropout(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, groups, 0.5, 1.0, 0.0]
