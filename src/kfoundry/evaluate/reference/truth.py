"""The float64 truth of an output, held compactly: the reference plus a float32 correction.

The judge keeps every input set's expected outputs and their float64 truth on the GPU. For a float32
output of 2 GB the truth is 4 GB more per set, and seven sets of it took a third of an H200's
memory, memory the candidate workers then did not get. A float output's truth t is held instead as
d = float32(t - r) beside the reference r the judge keeps anyway; it is read back as r + d in
float64. Since r is exact in float64, the value read back is within 2^-24 |t - r| (plus one float64
rounding) of t: the reference's own error against the truth, known to seven digits, a change in
e(c) = max |c - t| / (atol + rtol |t|) of a few parts in 10^8 of e(r).

Only a 16- or 32-bit float output whose reference, truth and correction are all finite is held this
way; any other output keeps its float64 truth as it is (NaN and Inf need the exact values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

COMPACT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
CHUNK = 1 << 25  # elements per pass while the correction is made: float64 temporaries of 256 MB


@dataclass
class Correction:
    """The truth of one output as a float32 difference from that output's reference."""

    correction: torch.Tensor  # float32, the reference's shape, contiguous (logical order)

    @property
    def shape(self) -> torch.Size:
        return self.correction.shape

    @property
    def device(self) -> torch.device:
        return self.correction.device

    def to(self, device: Any) -> Correction:
        return Correction(self.correction.to(device))

    def full(self, reference: torch.Tensor) -> torch.Tensor:
        """The truth in float64 (a temporary of twice the output's size)."""
        return reference.double() + self.correction.double()


def held_bytes(output: torch.Tensor) -> int:
    """Bytes the judge keeps for the truth of an output like this one (shapes only: works on meta)."""
    if output.dtype in COMPACT_DTYPES:
        return output.numel() * 4
    if output.is_floating_point():
        return output.numel() * 8
    return output.numel() * output.element_size()


def _correction(reference: torch.Tensor, truth: torch.Tensor) -> Correction | None:
    """float32(truth - reference), a chunk at a time; None where a value is not finite."""
    r, t = reference.reshape(-1), truth.reshape(-1)
    out = torch.empty(r.numel(), dtype=torch.float32, device=reference.device)
    for begin in range(0, r.numel(), CHUNK):
        rd = r[begin:begin + CHUNK].double()
        if not bool(torch.isfinite(rd).all()):
            return None
        out[begin:begin + CHUNK] = t[begin:begin + CHUNK] - rd
        del rd
    if not bool(torch.isfinite(out).all()):  # a non-finite truth, or a difference beyond float32
        return None
    return Correction(out.reshape(reference.shape))


def compact(reference_leaves: list, truth_leaves: list) -> list:
    """The truth's leaves, each 16/32-bit float one as a Correction where it can be (see the module)."""
    if len(reference_leaves) != len(truth_leaves):
        return list(truth_leaves)
    held = []
    for r, t in zip(reference_leaves, truth_leaves):
        if (isinstance(r, torch.Tensor) and isinstance(t, torch.Tensor) and r.dtype in COMPACT_DTYPES
                and t.dtype == torch.float64 and r.shape == t.shape and r.device == t.device and r.numel()):
            held.append(_correction(r, t) or t)
        else:
            held.append(t)
    return held


def as_float64(truth: Any, reference: torch.Tensor) -> Any:
    """A truth leaf as a float64 tensor (a Correction read back against its reference); others as they are."""
    return truth.full(reference) if isinstance(truth, Correction) else truth
