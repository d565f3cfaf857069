"""Shared by the tunables' tests: the examples folder, two sources (a CUDA extension, Triton launches whose grids
spell their block sizes) and reading what was found."""

from __future__ import annotations

from pathlib import Path

from kfoundry.experts.tunables import find_tunables

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

CUDA = '''
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#define TILE 16
#define N_ITEMS 1000
#define WARP_SIZE 32
constexpr int THREADS = 256;
const int threads = 100;

__global__ void tiled(const float* a, float* c, int n) {
    __shared__ float As[TILE][TILE];
}

template <int BLOCK_SIZE>
__global__ void reduce_kernel(const float* x, float* y, int n) {
    __shared__ float buf[BLOCK_SIZE];
}

__global__ void __launch_bounds__(512) scale_kernel(const float* x, float* y, int n) {
    __shared__ float s[512];
}

torch::Tensor run(torch::Tensor x) {
    int n = x.numel();
    dim3 block(TILE, TILE);
    dim3 grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
    tiled<<<grid, block>>>(x.data_ptr<float>(), x.data_ptr<float>(), n);
    reduce_kernel<256><<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), x.data_ptr<float>(), n);
    int blocks = (n + 511) / 512;
    scale_kernel<<<blocks, 512>>>(x.data_ptr<float>(), x.data_ptr<float>(), n);
    int nb = (n + THREADS - 1) / THREADS;
    scale_kernel<<<nb, THREADS>>>(x.data_ptr<float>(), x.data_ptr<float>(), n);
    return x;
}
"""
cpp_src = "torch::Tensor run(torch::Tensor x);"
ext = load_inline(name="t", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["run"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
'''

TIED = '''
import triton
import triton.language as tl

BLOCK_SIZE: tl.constexpr = tl.constexpr(512)
UNUSED_BLOCK = 64
N = 4096


@triton.jit
def k1(x, n, XBLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)


@triton.jit
def k2(x, n, BM: tl.constexpr, BN: tl.constexpr):
    pass


class ModelNew:
    BLOCK_R = 128

    def __init__(self):
        self.BLOCK = 256

    def forward(self, x):
        n = x.numel()
        BLOCK_START = 0
        BLOCK_ODD = 1000
        x2 = x.view(-1, 1024)  # a shape, not the block size: left alone
        nblocks = (x2.numel() + 1023) // 1024
        k1[(nblocks,)](x, n, XBLOCK=1024, num_warps=4)  # the grid spells 1024 too: rewritten with it
        k2[(triton.cdiv(n, 64), triton.cdiv(n, 64))](x, n, BM=64, BN=64)  # which 64 is which? left alone
        k1[(triton.cdiv(n, self.BLOCK),)](x, n, XBLOCK=self.BLOCK)
        k1[(triton.cdiv(n, self.BLOCK_R + BLOCK_START),)](x, n, XBLOCK=self.BLOCK_R + BLOCK_ODD)
        k1[(triton.cdiv(n, N),)](x, n, XBLOCK=N)
'''


def by_name(source: str) -> dict:
    return {t.name: t for t in find_tunables(source)}


def text_at(source: str, span) -> str:
    return source.encode()[span.start:span.end].decode()
