"""Hand-written candidates for the precision-agreement benchmark, one per problem of this folder, each
built at a chosen `tl.dot` precision: "ieee", "tf32", "tf32x3" (Triton's), "fp16" (operands cast to fp16)
or "fp16x3" (each operand split into an fp16 high part and a scaled fp16 low part, three products).

`source(problem, dot)` is a whole candidate file: the shared kernels below and the problem's ModelNew."""

from __future__ import annotations

DOTS = ("ieee", "tf32", "tf32x3", "fp16", "fp16x3")

KERNELS = '''
import torch
import triton
import triton.language as tl
from torch import nn

DOT = {dot!r}


@triton.jit
def _product(a, b, acc, DOT: tl.constexpr):
    if DOT == "fp16x3":
        a_hi = a.to(tl.float16)
        a_lo = ((a - a_hi.to(tl.float32)) * 2048.0).to(tl.float16)
        b_hi = b.to(tl.float16)
        b_lo = ((b - b_hi.to(tl.float32)) * 2048.0).to(tl.float16)
        low = tl.dot(a_hi, b_lo) + tl.dot(a_lo, b_hi)
        acc = tl.dot(a_hi, b_hi, acc) + low * (1.0 / 2048.0)
    elif DOT == "fp16":
        acc = tl.dot(a.to(tl.float16), b.to(tl.float16), acc)
    else:
        acc = tl.dot(a, b, acc, input_precision=DOT)
    return acc


@triton.jit
def _linear_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr, DOT: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(x_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < N) & (rk[:, None] < K), other=0.0)
        acc = _product(a, b, acc, DOT)
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _conv3x3_kernel(x_ptr, w_ptr, b_ptr, out_ptr, B, C, H, W, OC, BM: tl.constexpr, BN: tl.constexpr,
                    BK: tl.constexpr, DOT: tl.constexpr, RELU: tl.constexpr):
    """Implicit GEMM: rows (sample, y, x), columns output channels, reduction (input channel, ky, kx)."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    n, pix = rm // (H * W), rm % (H * W)
    oy, ox = pix // W, pix % W
    K = C * 9
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        c, tap = rk // 9, rk % 9
        iy = oy[:, None] + tap[None, :] // 3 - 1
        ix = ox[:, None] + tap[None, :] % 3 - 1
        inside = (rm[:, None] < B * H * W) & (rk[None, :] < K) & (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W)
        a = tl.load(x_ptr + ((n[:, None] * C + c[None, :]) * H + iy) * W + ix, mask=inside, other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + rk[:, None], mask=(rn[None, :] < OC) & (rk[:, None] < K), other=0.0)
        acc = _product(a, b, acc, DOT)
    acc += tl.load(b_ptr + rn, mask=rn < OC, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    offsets = ((n[:, None] * OC + rn[None, :]) * H + oy[:, None]) * W + ox[:, None]
    tl.store(out_ptr + offsets, acc, mask=(rm[:, None] < B * H * W) & (rn[None, :] < OC))


@triton.jit
def _group_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, C, HW, G, eps, BLOCK: tl.constexpr):
    """One program per (sample, group): two-pass statistics, then the per-channel affine."""
    row = tl.program_id(0)
    per_group = (C // G) * HW
    offsets = tl.arange(0, BLOCK)
    ok = offsets < per_group
    x = tl.load(x_ptr + row * per_group + offsets, mask=ok, other=0.0)
    mean = tl.sum(x, axis=0) / per_group
    centred = tl.where(ok, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=0) / per_group + eps)
    channel = (row % G) * (C // G) + offsets // HW
    w = tl.load(w_ptr + channel, mask=ok, other=0.0)
    b = tl.load(b_ptr + channel, mask=ok, other=0.0)
    tl.store(out_ptr + row * per_group + offsets, centred * rstd * w + b, mask=ok)


def _conv3x3(x, weight, bias, relu):
    B, C, H, W = x.shape
    OC = weight.shape[0]
    out = torch.empty((B, OC, H, W), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(B * H * W, 64), triton.cdiv(OC, 32))
    _conv3x3_kernel[grid](x.contiguous(), weight.contiguous(), bias, out, B, C, H, W, OC, BM=64, BN=32, BK=32,
                          DOT=DOT, RELU=relu)
    return out
'''

MODELS = {
    "linear_bias": '''

class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        M, K = x.shape
        N = self.linear.weight.shape[0]
        out = torch.empty((M, N), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        _linear_kernel[grid](x.contiguous(), self.linear.weight, self.linear.bias, out, M, N, K, BM=64, BN=64,
                             BK=32, DOT=DOT)
        return out
''',
    "conv2d_relu": '''

class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x):
        return _conv3x3(x, self.conv.weight, self.conv.bias, True)
''',
    "conv2d_groupnorm": '''

class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        y = _conv3x3(x, self.conv.weight, self.conv.bias, False)
        B, C, H, W = y.shape
        G = self.norm.num_groups
        out = torch.empty_like(y)
        _group_norm_kernel[(B * G,)](y, self.norm.weight, self.norm.bias, out, C, H * W, G, self.norm.eps,
                                     BLOCK=triton.next_power_of_2((C // G) * H * W))
        return out
''',
}


def source(problem: str, dot: str) -> str:
    if dot not in DOTS:
        raise ValueError(f"unknown dot precision {dot!r}: one of {', '.join(DOTS)}")
    return KERNELS.format(dot=dot).lstrip() + MODELS[problem]
