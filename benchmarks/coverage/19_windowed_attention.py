"""Windowed self-attention over image patches (a Swin-style block), reconstructed from a crash report: the
windows shifted by torch.roll and cut by view/permute, multi-head attention within each window with a relative
position bias (a learned table indexed by a buffer of indices) and a learned logit scale clamped with a constant
built in forward (torch.log(torch.tensor(100.0))), windows put back and unshifted, an MLP."""
import torch
from torch import nn

batch_size = 8
size = 56
dim = 96
heads = 3
window = 7


class Model(nn.Module):
    def __init__(self, dim, heads, window):
        super().__init__()
        self.heads, self.window = heads, window
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones(heads, 1, 1)))
        self.bias_table = nn.Parameter(0.02 * torch.randn((2 * window - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("bias_index", relative[..., 0] * (2 * window - 1) + relative[..., 1])

    def forward(self, x):
        b, h, w, c = x.shape
        s = self.window
        shift = s // 2
        y = torch.roll(self.norm1(x), shifts=(-shift, -shift), dims=(1, 2))
        y = y.view(b, h // s, s, w // s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, s * s, c)
        qkv = self.qkv(y).reshape(y.shape[0], s * s, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scale = torch.clamp(self.logit_scale, max=torch.log(torch.tensor(100.0, device=x.device))).exp()
        attn = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5 * scale
        bias = self.bias_table[self.bias_index.reshape(-1)].reshape(s * s, s * s, -1).permute(2, 0, 1)
        attn = attn + bias.unsqueeze(0)
        y = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(-1, s * s, c)
        y = self.proj(y).view(b, h // s, w // s, s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        x = x + torch.roll(y, shifts=(shift, shift), dims=(1, 2))
        return x + self.mlp(self.norm2(x))


def get_inputs():
    return [torch.randn(batch_size, size, size, dim)]


def get_init_inputs():
    return [dim, heads, window]
