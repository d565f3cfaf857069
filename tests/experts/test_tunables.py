"""Finding the tunable constants of a candidate by its AST, and rewriting them in place."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kfoundry.experts.tunables import (
    BLOCK_1D,
    BLOCK_2D,
    CUDA_THREADS,
    GROUPS,
    STAGES,
    WARPS,
    apply_values,
    discover,
    find_tunables,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

AUTOTUNED = '''
import torch
import triton
import triton.language as tl

GROUP_SIZE_M = 8


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32}, num_warps=4, num_stages=3),
        triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32}, num_warps=8, num_stages=4),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                   BLOCK_SIZE_K: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    a = tl.load(a_ptr + tl.arange(0, BLOCK_SIZE_M)[:, None] + tl.arange(0, BLOCK_SIZE_K)[None, :])
    b = tl.load(b_ptr + tl.arange(0, BLOCK_SIZE_K)[:, None] + tl.arange(0, BLOCK_SIZE_N)[None, :])
    acc = tl.dot(a.to(tl.float16), b.to(tl.float16), acc)


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)
        _matmul_kernel[grid](a, b, c, M, N, K, GROUP_SIZE_M=GROUP_SIZE_M)
        return c
'''

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


def test_pointwise_example_has_its_block_and_warps():
    found = by_name((EXAMPLES / "pointwise_chain" / "kernel.py").read_text())
    assert set(found) == {"BLOCK", "num_warps"}
    block, warps = found["BLOCK"], found["num_warps"]
    assert (block.value, block.kind, block.choices) == (1024, "block", list(BLOCK_1D))
    assert (warps.value, warps.kind, warps.choices) == (4, "warps", list(WARPS))
    assert block.where == "line 31: BLOCK = 1024 in forward"
    assert warps.where == "line 35: launch of _affine_gelu_clamp_kernel"


@pytest.mark.parametrize("example, expected", [
    ("conv_relu", {"BM": 128, "BN": 64, "BK": 32, "num_warps": 4, "num_stages": 3}),
    ("linear_epilogue", {"BM": 128, "BN": 128, "BK": 32, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}),
])
def test_matmul_examples_have_2d_tiles_warps_stages(example, expected):
    found = by_name((EXAMPLES / example / "kernel.py").read_text())
    assert {name: t.value for name, t in found.items()} == expected
    assert all(found[name].choices == list(BLOCK_2D) for name in ("BM", "BN", "BK"))
    assert found["num_stages"].choices == list(STAGES)
    if "GROUP_M" in found:
        assert (found["GROUP_M"].kind, found["GROUP_M"].choices) == ("group", list(GROUPS))


def test_matmul_example_tile_group_reads_resolved_names():
    found = discover((EXAMPLES / "linear_epilogue" / "kernel.py").read_text())
    [group] = found.tile_groups
    assert (group.m, group.n, group.k, group.warps, group.stages, group.element_bytes) == (128, 128, 32, 8, 3, 4)


@pytest.mark.parametrize("example", ["layernorm", "row_softmax"])
def test_size_dependent_examples_have_nothing_tunable(example):
    # BLOCK = next_power_of_2(n_cols) must cover the row; num_warps is a conditional on it
    assert find_tunables((EXAMPLES / example / "kernel.py").read_text()) == []


def test_autotune_configs_are_tunable_per_config():
    found = by_name(AUTOTUNED)
    assert found["GROUP_SIZE_M"].value == 8 and found["GROUP_SIZE_M"].where.endswith("in module")
    assert {name: t.value for name, t in found.items() if name.endswith("@config2")} == {
        "BLOCK_SIZE_M@config2": 128, "BLOCK_SIZE_N@config2": 64, "BLOCK_SIZE_K@config2": 32,
        "num_warps@config2": 8, "num_stages@config2": 4}
    assert found["BLOCK_SIZE_M@config1"].base == "BLOCK_SIZE_M"
    assert found["BLOCK_SIZE_M@config1"].where.startswith("line 11: triton.Config #1")
    groups = {g.label: g for g in discover(AUTOTUNED).tile_groups}
    config2 = groups["line 12: triton.Config #2"]
    assert (config2.m, config2.n, config2.k, config2.warps, config2.stages) == (128, 64, 32, 8, 4)
    assert config2.element_bytes == 2  # the kernel visibly casts to fp16 before tl.dot


def test_cuda_defines_constants_and_launches():
    found = by_name(CUDA)
    assert set(found) == {"TILE", "THREADS", "BLOCK_SIZE", "threads"}
    assert (found["TILE"].kind, found["TILE"].value) == ("cuda_const", 16)  # a side of dim3 block(TILE, TILE)
    assert (found["THREADS"].kind, found["THREADS"].choices) == ("cuda_threads", list(CUDA_THREADS))
    assert found["TILE"].where.startswith("line 7: #define TILE in cuda_src")
    # N_ITEMS is a size, WARP_SIZE a fact, `threads = 100` no valid block: none is tunable
    template = found["BLOCK_SIZE"]
    assert "template argument BLOCK_SIZE of the launch of reduce_kernel" in template.where
    assert sorted(text_at(CUDA, s) for s in template.spans) == ["255", "256", "256", "256"]
    literal = found["threads"]  # the literal 512 of scale_kernel's launch: the grid, bounds and buffer spell it
    assert literal.value == 512 and "block size of the launch of scale_kernel" in literal.where
    assert sorted((text_at(CUDA, s), s.offset) for s in literal.spans) == [("511", -1)] + [("512", 0)] * 4


def test_cuda_facts_evaluate_blocks_and_static_shared_memory():
    facts = {f.label: f for f in discover(CUDA).cuda}
    assert facts["cuda_src"].max_threads == 512
    assert facts["cuda_src"].static_shared_bytes == 16 * 16 * 4 + 512 * 4  # buf[BLOCK_SIZE] does not evaluate


def test_literal_and_named_sizes_tie_to_their_grids():
    found = by_name(TIED)
    xblock = found["XBLOCK"]
    assert [(text_at(TIED, s), s.offset) for s in xblock.spans] == [("1024", 0), ("1023", -1), ("1024", 0)]
    assert found["BLOCK_SIZE"].value == 512  # a global constexpr the kernel reads
    assert found["BLOCK"].where == "line 24: self.BLOCK = 256 in __init__"
    assert found["BLOCK_R"].where.endswith("in ModelNew")
    for absent in ("BM", "BN", "UNUSED_BLOCK", "BLOCK_START", "BLOCK_ODD", "N"):
        assert absent not in found
    assert find_tunables(TIED.replace("BM=64, BN=64", "BM=64, BN=32").replace("cdiv(n, 64))", "cdiv(n, 32))"))


def test_duplicate_names_are_qualified():
    source = (EXAMPLES / "pointwise_chain" / "kernel.py").read_text()
    launch = "        _affine_gelu_clamp_kernel[grid](x, y, n, 1.0, 0.0, 0.0, 1.0, BLOCK=BLOCK, num_warps=4)\n"
    twice = source.replace("        return y\n", launch + "        return y\n")
    names = [t.name for t in find_tunables(twice)]
    assert names == ["BLOCK", "num_warps@line35", "num_warps@line36"]


def test_apply_values_rewrites_only_the_digits():
    source = (EXAMPLES / "pointwise_chain" / "kernel.py").read_text()
    source = source.replace("BLOCK = 1024", "BLOCK = 1024  # élément → 1024")  # byte columns differ from chars
    tunables = find_tunables(source)
    out = apply_values(source, tunables, {"BLOCK": 256, "num_warps": 8})
    assert out == source.replace("BLOCK = 1024", "BLOCK = 256").replace("num_warps=4", "num_warps=8")
    ast.parse(out)


def test_apply_values_writes_the_ceil_literals():
    tunables = find_tunables(TIED)
    out = apply_values(TIED, tunables, {"XBLOCK": 2048})
    assert "nblocks = (x2.numel() + 2047) // 2048" in out and "XBLOCK=2048, num_warps=4" in out
    assert "x.view(-1, 1024)" in out
    cuda = apply_values(CUDA, find_tunables(CUDA), {"threads": 128, "BLOCK_SIZE": 64})
    assert "__launch_bounds__(128)" in cuda and "s[128]" in cuda and "int blocks = (n + 127) / 128;" in cuda
    assert "reduce_kernel<64><<<(n + 63) / 64, 64>>>" in cuda


def test_cuda_dim3_grids_and_unnamed_template_sizes():
    source = '''
kernels = r"""
template <typename T, int N_ITEMS>
__global__ void k(const T* x, int n) {}
torch::Tensor run(torch::Tensor x) {
    int n = x.numel();
    dim3 grid((n + 127) / 128);
    k<float, 4><<<grid, 128>>>(x.data_ptr<float>(), n);
    k<float, 256><<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
    return x;
}
"""
'''
    # N_ITEMS is no tunable name, and the 256 of the second launch is its value too: that launch is left alone
    [threads] = find_tunables(source)
    assert (threads.name, threads.value) == ("threads", 128)
    out = apply_values(source, [threads], {"threads": 256})
    assert "dim3 grid((n + 255) / 256);" in out and "k<float, 4><<<grid, 256>>>" in out


@pytest.mark.parametrize("garbage", ["", "def (:", "x = 1\x00", "(" * 5000 + ")" * 5000, "\ud800", None, 42,
                                     "BLOCK = 1024", "kernel[grid](BLOCK=)"])
def test_odd_input_finds_nothing(garbage):
    assert find_tunables(garbage) == []
