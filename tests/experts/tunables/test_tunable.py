"""Rewriting tunables in place: only their digits, the literals tied to them included."""

from __future__ import annotations

import ast

from kfoundry.experts.tunables import apply_values, find_tunables
from tests.experts.tunables.helpers import CUDA, EXAMPLES, TIED


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
