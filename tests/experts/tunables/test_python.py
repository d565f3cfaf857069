"""The Python half: Triton launches, block-like constants, triton.Config entries and tile groups."""

from __future__ import annotations

import pytest

from kfoundry.experts.tunables import BLOCK_1D, BLOCK_2D, GROUPS, STAGES, WARPS, discover, find_tunables
from tests.experts.tunables.helpers import EXAMPLES, TIED, by_name, text_at

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
