"""A bundled table of GPUs: what a kernel writer sizes tiles and pipeline stages by, and the peaks a
roofline needs. Every figure is a public datasheet figure (NVIDIA's product datasheets and architecture
whitepapers; the per-SM and per-block limits from the CUDA C++ Programming Guide's table of compute
capabilities), not a measurement: peaks are dense (no structured sparsity); memory sizes are the
marketed capacities, taken in GiB as HBM and GDDR stacks are built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class GPUSpec:
    name: str
    fragments: tuple[str, ...]  # how a device name names it, words lowercased (matched tolerantly: see `lookup`)
    compute_capability: str
    sm_count: int
    shared_memory_per_block_bytes: int  # the opt-in maximum for one block
    shared_memory_per_sm_bytes: int
    registers_per_sm: int  # 32-bit registers
    max_registers_per_thread: int
    l2_bytes: int
    memory_bytes: int
    bandwidth_gbs: float
    # dense TFLOP/s: fp32 (CUDA cores); tf32, fp16, bf16 (tensor cores, fp32 accumulate)
    peak_tflops: dict[str, float] = field(default_factory=dict)


_HOPPER_SMEM = dict(shared_memory_per_block_bytes=227 * KiB, shared_memory_per_sm_bytes=228 * KiB)
_AMPERE_SMEM = dict(shared_memory_per_block_bytes=163 * KiB, shared_memory_per_sm_bytes=164 * KiB)
_ADA_SMEM = dict(shared_memory_per_block_bytes=99 * KiB, shared_memory_per_sm_bytes=100 * KiB)
_REGISTERS = dict(registers_per_sm=65536, max_registers_per_thread=255)
_HOPPER_PEAKS = {"fp32": 67.0, "tf32": 495.0, "fp16": 990.0, "bf16": 990.0}

GPUS: tuple[GPUSpec, ...] = (
    GPUSpec("NVIDIA H100 SXM", ("h100", "h100 sxm"), "9.0", 132, **_HOPPER_SMEM, **_REGISTERS,
            l2_bytes=50 * MiB, memory_bytes=80 * GiB, bandwidth_gbs=3350.0, peak_tflops=_HOPPER_PEAKS),
    GPUSpec("NVIDIA H100 PCIe", ("h100 pcie",), "9.0", 114, **_HOPPER_SMEM, **_REGISTERS,
            l2_bytes=50 * MiB, memory_bytes=80 * GiB, bandwidth_gbs=2000.0,
            peak_tflops={"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0}),
    GPUSpec("NVIDIA H200", ("h200", "gh200"), "9.0", 132, **_HOPPER_SMEM, **_REGISTERS,
            l2_bytes=50 * MiB, memory_bytes=141 * GiB, bandwidth_gbs=4800.0, peak_tflops=_HOPPER_PEAKS),
    GPUSpec("NVIDIA A100 80GB SXM", ("a100",), "8.0", 108, **_AMPERE_SMEM, **_REGISTERS,
            l2_bytes=40 * MiB, memory_bytes=80 * GiB, bandwidth_gbs=2039.0,
            peak_tflops={"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}),
    GPUSpec("NVIDIA L40S", ("l40s",), "8.9", 142, **_ADA_SMEM, **_REGISTERS,
            l2_bytes=96 * MiB, memory_bytes=48 * GiB, bandwidth_gbs=864.0,
            peak_tflops={"fp32": 91.6, "tf32": 183.0, "fp16": 362.0, "bf16": 362.0}),
    GPUSpec("NVIDIA GeForce RTX 4090", ("rtx 4090", "4090"), "8.9", 128, **_ADA_SMEM, **_REGISTERS,
            l2_bytes=72 * MiB, memory_bytes=24 * GiB, bandwidth_gbs=1008.0,
            peak_tflops={"fp32": 82.6, "tf32": 82.6, "fp16": 165.0, "bf16": 165.0}),
)

TYPICAL = "H100"  # the target assumed when a prompt must show one and none was named

_NOISE = {"nvidia", "geforce", "tesla"}


def _words(name: str) -> str:
    return " ".join(w for w in re.split(r"[^a-z0-9]+", name.lower()) if w and w not in _NOISE)


def _pattern(fragment: str) -> re.Pattern[str]:
    # a fragment's words may run together ("h100pcie"); it may not sit inside a longer word or number
    # ("a100" is not in "rtx a1000", "h100" is in "h100 80gb hbm3")
    body = r"\s?".join(re.escape(w) for w in fragment.split())
    return re.compile(rf"(?<![a-z0-9]){body}(?![0-9])")


_PATTERNS = [(len(f.replace(" ", "")), _pattern(f), spec) for spec in GPUS for f in spec.fragments]


def lookup(name: str) -> GPUSpec | None:
    """The GPU a name means ("h200", "NVIDIA H200", "NVIDIA H100 80GB HBM3", "H100 PCIe"), case and
    punctuation aside; where fragments of several match, the longest wins (H100 PCIe over H100)."""
    text = _words(name)
    found = [(length, spec) for length, pattern, spec in _PATTERNS if pattern.search(text)]
    return max(found, key=lambda item: item[0])[1] if found else None


def known_names() -> list[str]:
    return [spec.name for spec in GPUS]
