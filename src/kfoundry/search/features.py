"""Behaviour descriptors read from a candidate's code and its evaluation, and the MAP-Elites cell."""

from __future__ import annotations

import re
from typing import Any

from kfoundry.types import Diagnosis

_TRITON_KERNEL = re.compile(r"@triton\.jit\b")
_CUDA_KERNEL = re.compile(r"\b__global__\b")
_DOT = re.compile(r"\btl\.dot\s*\(")
# BLOCK_M=64 (launch), 'BLOCK_SIZE': 128 (autotune config), #define TILE 32 / const int BLOCK = 256 (CUDA)
_TILE = re.compile(r"""['"]?\b((?:BLOCK|TILE)\w*)['"]?\s*(?:[:=]|\s)\s*(\d+)\b""")
_WARPS = re.compile(r"""['"]?\bnum_warps['"]?\s*[:=]\s*(\d+)\b""")


def _tile_bucket(sizes: list[int]) -> str:
    if not sizes:
        return "none"
    largest = max(sizes)
    if largest <= 32:
        return "small"
    if largest <= 128:
        return "medium"
    return "large"


def _warps_bucket(warps: list[int]) -> str:
    if not warps:
        return "default"
    most = max(warps)
    if most <= 4:
        return "low"
    if most <= 8:
        return "mid"
    return "high"


def _backend(source: str, triton_kernels: int, cuda_kernels: int) -> str:
    if cuda_kernels or "load_inline" in source:
        return "cuda"
    if triton_kernels or re.search(r"^\s*import triton\b", source, re.MULTILINE):
        return "triton"
    return "torch"


def features(source: str, diagnosis: Diagnosis | None = None) -> dict[str, Any]:
    """What the code does (backend, kernels, tl.dot, tiles, warps) and how it is bound (from the diagnosis)."""
    triton_kernels = len(_TRITON_KERNEL.findall(source))
    cuda_kernels = len(_CUDA_KERNEL.findall(source))
    tiles = sorted({int(value) for _, value in _TILE.findall(source)})
    warps = sorted({int(value) for value in _WARPS.findall(source)})
    return {
        "backend": _backend(source, triton_kernels, cuda_kernels),
        "kernels": triton_kernels + cuda_kernels,
        "uses_dot": bool(_DOT.search(source)),
        "tile_sizes": tiles,
        "tile": _tile_bucket(tiles),
        "num_warps": warps,
        "warps": _warps_bucket(warps),
        "bound": (diagnosis.bound if diagnosis is not None and diagnosis.bound else "unknown"),
    }


def cell(feats: dict[str, Any]) -> tuple:
    """The MAP-Elites grid cell: coarse enough that cells fill, fine enough to keep distinct designs."""
    kernels = feats.get("kernels", 0)
    return (feats.get("backend", "torch"), kernels if kernels < 3 else "3+", bool(feats.get("uses_dot")),
            feats.get("tile", "none"), feats.get("warps", "default"), feats.get("bound", "unknown"))
