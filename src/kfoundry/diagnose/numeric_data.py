"""The data every numeric pattern detector reads (kfoundry.diagnose.numeric_patterns): a candidate and
its reference as flat float64 tensors, which elements are off, per-dim counts, a sample of large
outputs, and small helpers for plain-JSON numbers and index arithmetic."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

SAMPLE_LIMIT = 1 << 20  # outputs larger than this: the costlier checks look at a sample
SAMPLE_SIZE = 1 << 18
PROBE_SIZE = 4096  # off elements a transposition candidate is first tried on
FIX_PASS = 0.99  # a fit explains the error when the corrected output passes on this fraction
MIN_STRUCTURED = 16  # smaller outputs get no location patterns (a tail of a 4-vector says nothing)


def num(x: Any) -> float | None:
    """A plain float, to 6 significant digits, or None when not finite (JSON has no NaN/Inf)."""
    value = float(x)
    return float(f"{value:.6g}") if math.isfinite(value) else None


def unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return list(reversed(index))


def pow2_factor(k: int, cap: int = 1 << 16) -> int:
    """The largest power of two (up to cap) dividing k > 0."""
    return min(k & -k, cap) if k > 0 else 0


def floor_block(n: int, k: int, smallest: int = 8) -> int | None:
    """The largest power of two B (smallest..65536) with (n // B) * B == k < n: what a grid of n // B
    programs of B elements covers."""
    for shift in range(16, smallest.bit_length() - 2, -1):
        if k < n and (n >> shift) << shift == k:
            return 1 << shift
    return None


def ceil_block(n: int, k: int, smallest: int = 16) -> int | None:
    """The largest power of two B (smallest..65536) with cdiv(n, B) * B == k > n: n padded to blocks."""
    for shift in range(16, smallest.bit_length() - 2, -1):
        if k > n and -(-n >> shift) << shift == k:
            return 1 << shift
    return None


def fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def ranges(indices: list[int], limit: int = 6) -> str:
    """[1, 2, 3, 7] -> '1..3, 7'."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}..{b}" if b > a else f"{a}" for a, b in runs[:limit])
    return text + (", ..." if len(runs) > limit else "")


@dataclass
class OutputData:
    """A candidate and its reference, flat, float64, with what every detector needs."""

    shape: tuple[int, ...]
    c: torch.Tensor
    r: torch.Tensor
    diff: torch.Tensor  # |c - r|: 0 where both are NaN or the same Inf, NaN/Inf where only one is
    r_abs: torch.Tensor
    bad: torch.Tensor  # not isclose(c, r, atol, rtol, equal_nan=True)
    atol: float
    rtol: float
    count_off: int
    nonfinite: torch.Tensor | None  # c is NaN/Inf where r is finite; None when both are finite everywhere
    truth: torch.Tensor | None
    sample: torch.Tensor | None  # flat indices the costlier checks use; None: all elements
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, shape: tuple[int, ...], c: torch.Tensor, r: torch.Tensor, atol: float, rtol: float,
              truth: torch.Tensor | None) -> OutputData:
        # written for outputs of tens of millions of elements: few passes, in place where possible
        diff = (c - r).abs_()
        r_abs = r.abs()
        bad = ~(diff <= r_abs.mul(rtol).add_(atol))
        nonfinite = None
        if not (math.isfinite(float(c.sum())) and math.isfinite(float(r.sum()))):
            c_nan, r_nan = torch.isnan(c), torch.isnan(r)
            c_odd, r_odd = c_nan | torch.isinf(c), r_nan | torch.isinf(r)
            if bool(c_odd.any()) or bool(r_odd.any()):
                agree = (c == r) | (c_nan & r_nan)
                bad &= ~agree
                bad |= r_odd & ~agree  # an Inf reference is matched only by the same Inf
                diff.masked_fill_(agree, 0.0)
                nonfinite = c_odd & ~r_odd
        sample = None
        if c.numel() > SAMPLE_LIMIT:
            generator = torch.Generator().manual_seed(0)
            sample = torch.randint(c.numel(), (SAMPLE_SIZE,), generator=generator)
        return cls(shape, c, r, diff, r_abs, bad, atol, rtol, int(bad.count_nonzero()), nonfinite, truth, sample)

    @property
    def numel(self) -> int:
        return self.c.numel()

    @property
    def all_finite(self) -> bool:
        return self.nonfinite is None

    @property
    def first_off(self) -> int:
        return int(torch.argmax(self.bad.view(torch.uint8)))

    def dim_counts(self) -> list[torch.Tensor]:
        """Off elements per index of each dim."""
        if "dims" not in self._cache:
            bad = self.bad.view(torch.uint8).view(self.shape)
            rank = len(self.shape)
            self._cache["dims"] = [bad.to(torch.int64) if rank == 1 else
                                   bad.sum(dim=[i for i in range(rank) if i != d], dtype=torch.int64)
                                   for d in range(rank)]
        return self._cache["dims"]

    def values(self, off_only: bool) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """(positions, candidate values, reference values) of the finite (and off) elements the costlier
        checks look at; positions None: all elements."""
        key = ("values", off_only)
        if key not in self._cache:
            positions = self._positions(off_only)
            self._cache[key] = (positions, self.take(self.c, positions), self.take(self.r, positions))
        return self._cache[key]

    def _positions(self, off_only: bool) -> torch.Tensor | None:
        usable = self.bad if off_only else None
        if not self.all_finite:
            finite = torch.isfinite(self.diff)
            usable = finite if usable is None else usable & finite
        if self.sample is not None:
            return self.sample if usable is None else self.sample[usable[self.sample]]
        return None if usable is None else usable.nonzero().flatten()

    def off_positions(self) -> torch.Tensor:
        """Flat indices of off elements, ascending: all of them, or those in the sample of a large output."""
        if "off" not in self._cache:
            if self.sample is None or self.count_off <= SAMPLE_SIZE:
                self._cache["off"] = self.bad.nonzero().flatten()
            else:
                self._cache["off"] = self.sample[self.bad[self.sample]].sort().values
        return self._cache["off"]

    def take(self, x: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
        return x if positions is None else x[positions]

    def likely_passes(self, c: torch.Tensor, r: torch.Tensor) -> bool:
        """Whether a correction passes on a small subsample: one that fails there is not worth a full pass."""
        step = max(1, c.numel() // PROBE_SIZE)
        return c.numel() > 0 and float(self.close(c[::step], r[::step]).double().mean()) >= FIX_PASS - 0.02

    def pass_fraction(self, c: torch.Tensor, r: torch.Tensor) -> float:
        return float(self.close(c, r).double().mean()) if self.likely_passes(c, r) else 0.0

    def close(self, c: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """isclose(c, r, atol, rtol, equal_nan=True), in fewer passes."""
        ok = (c - r).abs_() <= r.abs().mul_(self.rtol).add_(self.atol)
        if self.all_finite:
            return ok
        return (ok & ~torch.isinf(r)) | (c == r) | (torch.isnan(c) & torch.isnan(r))


def pattern(kind: str, description: str, confidence: float, data: dict[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "description": description, "confidence": round(float(confidence), 3), "data": data}
