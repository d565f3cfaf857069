"""A stage of two Swin-MLP blocks (Swin Transformer with the window attention replaced by a spatial MLP): per
block, LayerNorm, window partition with view/permute into 7 x 7 windows, heads split off the channels, a spatial
MLP over the 49 tokens of each window and head (a grouped 1x1 Conv1d, one group per head), heads merged, window
reverse, residual add; then LayerNorm, an MLP (Linear, GELU, Linear) and a second residual add. No shift, no
padding (the window divides the resolution)."""
import torch
from torch import nn

batch_size = 10
height = 56
width = 56
dim = 96
num_heads = 3
window = 7
depth = 2


class SwinMLPBlock(nn.Module):
    def __init__(self, dim, num_heads, window):
        super().__init__()
        self.heads, self.window = num_heads, window
        self.norm1 = nn.LayerNorm(dim)
        tokens = num_heads * window * window
        self.spatial_mlp = nn.Conv1d(tokens, tokens, kernel_size=1, groups=num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, H, W):
        B, L, C = x.shape
        ws, nh = self.window, self.heads
        h = self.norm1(x).view(B, H // ws, ws, W // ws, ws, C).permute(0, 1, 3, 2, 4, 5)
        h = h.reshape(-1, ws * ws, nh, C // nh).transpose(1, 2).reshape(-1, nh * ws * ws, C // nh)
        h = self.spatial_mlp(h)
        h = h.view(-1, nh, ws * ws, C // nh).transpose(1, 2).reshape(B, H // ws, W // ws, ws, ws, C)
        x = x + h.permute(0, 1, 3, 2, 4, 5).reshape(B, L, C)
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, height, width, dim, num_heads, window, depth):
        super().__init__()
        self.height, self.width = height, width
        self.blocks = nn.ModuleList(SwinMLPBlock(dim, num_heads, window) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x, self.height, self.width)
        return x


def get_inputs():
    return [torch.randn(batch_size, height * width, dim)]


def get_init_inputs():
    return [height, width, dim, num_heads, window, depth]
