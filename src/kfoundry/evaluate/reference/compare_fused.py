"""The judge's comparison of one float output in a single pass over the data (a Triton kernel).

`compare.compare_tensor` in PyTorch makes a dozen float64 passes over an output and its truth and
allocates several float64 temporaries of the output's size: for a 2 GB output that is over 200 GB
of memory traffic and 16 GB of scratch per comparison, while six candidate workers share the GPU.
This kernel reads the candidate's output, the reference's and the float64 truth (or its float32
correction, kfoundry.evaluate.reference.truth) once, converts to float64 in registers, and writes a few
figures per block of elements; the blocks' figures are then reduced with PyTorch. The figures are
the same ones, in float64: the largest absolute and relative errors, how many elements are outside
atol + rtol |reference| and the first of them, and the error ratios of the candidate and the
reference against the truth.

It is used only where every value is finite (it counts the values that are not): NaN and Inf need
the careful treatment in `compare.compare_tensor`, which then runs as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kfoundry.evaluate.reference.truth import Correction

BLOCK = 4096
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

_kernel = None


@dataclass
class FusedFigures:
    count: int  # elements
    nonfinite: int  # elements where the candidate, the reference or the truth is NaN or Inf
    max_abs: float
    max_rel: float | None  # None: no reference value is larger than atol
    mismatches: int  # elements outside atol + rtol |reference|
    first_mismatch: int | None  # flat index of the first of them
    ratio_candidate: float | None  # e(candidate) against the truth; None without a truth
    ratio_reference: float | None


def _build():
    import triton
    import triton.language as tl

    @triton.jit
    def fused_compare(c_ptr, r_ptr, t_ptr, n, tolerance_ptr, max_abs_ptr, max_rel_ptr, significant_ptr,
                      mismatches_ptr, first_ptr, nonfinite_ptr, ratio_c_ptr, ratio_r_ptr,
                      HAS_TRUTH: tl.constexpr, CORRECTION: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        atol = tl.load(tolerance_ptr)  # float64: a float argument would be a float32 (1e-4 off by 5e-8)
        rtol = tl.load(tolerance_ptr + 1)
        offsets = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < n
        c = tl.load(c_ptr + offsets, mask=inside, other=0.0).to(tl.float64)
        r = tl.load(r_ptr + offsets, mask=inside, other=0.0).to(tl.float64)
        infinity = float("inf")
        bad_value = (c != c) | (tl.abs(c) == infinity) | (r != r) | (tl.abs(r) == infinity)
        diff = tl.abs(c - r)
        size = tl.abs(r)
        mismatch = (diff > size * rtol + atol) & inside
        significant = (size > atol) & inside
        rel = tl.where(significant, diff / tl.where(significant, size, 1.0), 0.0)
        big = n + 1
        tl.store(max_abs_ptr + pid, tl.max(tl.where(inside, diff, 0.0), axis=0))
        tl.store(max_rel_ptr + pid, tl.max(rel, axis=0))
        tl.store(significant_ptr + pid, tl.sum(significant.to(tl.int64), axis=0))
        tl.store(mismatches_ptr + pid, tl.sum(mismatch.to(tl.int64), axis=0))
        tl.store(first_ptr + pid, tl.min(tl.where(mismatch, offsets, big), axis=0))
        if HAS_TRUTH:
            t = tl.load(t_ptr + offsets, mask=inside, other=0.0).to(tl.float64)
            if CORRECTION:  # the truth held as float32(t - r): kfoundry.evaluate.reference.truth
                t = t + r
            bad_value = bad_value | (t != t) | (tl.abs(t) == infinity)
            scale = atol + rtol * tl.abs(t)
            tl.store(ratio_c_ptr + pid, tl.max(tl.where(inside, tl.abs(c - t) / scale, 0.0), axis=0))
            tl.store(ratio_r_ptr + pid, tl.max(tl.where(inside, tl.abs(r - t) / scale, 0.0), axis=0))
        tl.store(nonfinite_ptr + pid, tl.sum((bad_value & inside).to(tl.int64), axis=0))

    return fused_compare


def usable(c: torch.Tensor, r: torch.Tensor, t: torch.Tensor | Correction | None) -> bool:
    """Whether the kernel applies: float tensors of one shape, on one device, a float64 truth (or a
    float32 correction) of that shape."""
    if c.dtype not in FLOATS or r.dtype != c.dtype or c.shape != r.shape or c.device != r.device or not c.numel():
        return False
    held, dtype = (t.correction, torch.float32) if isinstance(t, Correction) else (t, torch.float64)
    return held is None or (held.dtype == dtype and held.shape == c.shape and held.device == c.device)


def fused_figures(c: torch.Tensor, r: torch.Tensor, t: torch.Tensor | Correction | None, atol: float,
                  rtol: float) -> FusedFigures:
    """The figures of `c` against `r` (and `t`), elements taken in logical (row-major) order."""
    global _kernel
    if _kernel is None:
        _kernel = _build()
    corrected = isinstance(t, Correction)
    c, r = c.contiguous().reshape(-1), r.contiguous().reshape(-1)
    if corrected:
        t = t.correction
    t = t.contiguous().reshape(-1) if t is not None else None
    n = c.numel()
    blocks = (n + BLOCK - 1) // BLOCK
    floats = torch.zeros((4, blocks), dtype=torch.float64, device=c.device)
    counts = torch.zeros((4, blocks), dtype=torch.int64, device=c.device)
    max_abs, max_rel, ratio_c, ratio_r = floats
    significant, mismatches, first, nonfinite = counts
    tolerance = torch.tensor([atol, rtol], dtype=torch.float64, device=c.device)
    _kernel[(blocks,)](c, r, t if t is not None else c, n, tolerance, max_abs, max_rel, significant,
                       mismatches, first, nonfinite, ratio_c, ratio_r, HAS_TRUTH=t is not None,
                       CORRECTION=corrected, BLOCK=BLOCK,
                       enable_fp_fusion=False)  # no fused multiply-adds: PyTorch's roundings exactly
    float_max = floats.max(dim=1).values.tolist()
    sums = counts[[0, 1, 3]].sum(dim=1).tolist()
    lowest = int(first.min())
    mismatch_count = int(sums[1])
    return FusedFigures(
        count=n, nonfinite=int(sums[2]), max_abs=float_max[0],
        max_rel=float_max[1] if sums[0] else None,
        mismatches=mismatch_count, first_mismatch=lowest if mismatch_count else None,
        ratio_candidate=float_max[2] if t is not None else None,
        ratio_reference=float_max[3] if t is not None else None)
