"""Comparing a candidate's outputs with the reference's, with the float64 ground truth as arbiter.

A float output passes if allclose(c, r, atol, rtol, equal_nan) holds, or if its error against the
float64 truth t, e(c) = max |c - t| / (atol + rtol |t|), is within max(1, 2 e(r)): the PyTorch
reference may itself be off (TF32 convolutions), and an exact kernel must not fail for that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kfoundry.evaluate.reference import compare_fused
from kfoundry.evaluate.reference.truth import Correction


@dataclass
class OutputComparison:
    passed: bool
    message: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_fraction: float | None = None
    first_bad_index: list[int] | None = None
    error_ratio_candidate: float | None = None
    error_ratio_reference: float | None = None


@dataclass
class IndexSource:
    """Where an integer output came from: argmax/argmin of `values` along `dim`."""

    values: torch.Tensor
    dim: int | None
    keepdim: bool


@dataclass
class Comparison:
    passed: bool
    message: str
    outputs: list[OutputComparison] = field(default_factory=list)
    failed_output: int | None = None

    def worst(self, attr: str) -> float | None:
        values = [getattr(o, attr) for o in self.outputs if getattr(o, attr) is not None]
        return max(values) if values else None


def flatten_outputs(value: Any) -> list:
    """The leaves of a forward's result: tensors and plain values, in order."""
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in flatten_outputs(item)]
    if isinstance(value, dict):
        return [leaf for key in sorted(value, key=str) for leaf in flatten_outputs(value[key])]
    return [value]


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    return type(value).__name__


def error_ratio(x: torch.Tensor, truth: torch.Tensor, atol: float, rtol: float) -> float:
    """e(x) = max |x - t| / (atol + rtol |t|), with NaN in both places counting as agreement."""
    if not x.numel():
        return 0.0
    if bool(torch.isfinite(x).all()) and bool(torch.isfinite(truth).all()):  # the common case, in few passes
        return float((x - truth).abs_().div_(truth.abs().mul_(rtol).add_(atol)).max())
    diff = (x - truth).abs()
    both_nan = torch.isnan(x) & torch.isnan(truth)
    same_inf = torch.isinf(x) & (x == truth)
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    diff = torch.nan_to_num(diff, nan=float("inf"))
    ratio = diff / (atol + rtol * truth.abs().nan_to_num(nan=0.0, posinf=0.0))
    return float(ratio.max()) if ratio.numel() else 0.0


def _index_list(flat_index: int, shape: torch.Size) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat_index % size)
        flat_index //= size
    return list(reversed(index))


def _gather(values: torch.Tensor, index: torch.Tensor, source: IndexSource) -> torch.Tensor:
    if source.dim is None:
        return values.flatten()[index.flatten()].reshape(index.shape)
    idx = index if source.keepdim else index.unsqueeze(source.dim)
    return values.gather(source.dim, idx)


def compare_index_output(c: torch.Tensor, r: torch.Tensor, source: IndexSource, atol: float, rtol: float) -> OutputComparison:
    """argmax/argmin outputs pass where the values they point at agree (near-ties)."""
    values = source.values
    size = values.numel() if source.dim is None else values.shape[source.dim]
    if bool(((c < 0) | (c >= size)).any()):
        return OutputComparison(False, f"index output holds indices outside [0, {size})")
    picked_c = _gather(values, c.long(), source).double()
    picked_r = _gather(values, r.long(), source).double()
    close = torch.isclose(picked_c, picked_r, atol=atol, rtol=rtol, equal_nan=True)
    differing = float((c != r).double().mean())
    if bool(close.all()):
        return OutputComparison(True, f"index output: {differing:.2%} of indices differ, all at near-ties", mismatch_fraction=0.0)
    bad = (~close).flatten()
    first = int(bad.nonzero()[0])
    return OutputComparison(
        False,
        f"index output points at values that differ from the reference's: {float(bad.double().mean()):.2%} off, "
        f"first at {_index_list(first, c.shape)}",
        max_abs_error=float((picked_c - picked_r).abs().max()),
        mismatch_fraction=float(bad.double().mean()),
        first_bad_index=_index_list(first, c.shape),
    )


def compare_tensor(
    c: torch.Tensor, r: torch.Tensor, t: torch.Tensor | Correction | None, atol: float, rtol: float,
    index_source: IndexSource | None = None,
) -> OutputComparison:
    if tuple(c.shape) != tuple(r.shape):
        return OutputComparison(False, f"shape {tuple(c.shape)} but the reference's is {tuple(r.shape)}")
    if c.dtype != r.dtype:
        return OutputComparison(False, f"dtype {c.dtype} but the reference's is {r.dtype}")
    if c.is_complex():
        c, r = torch.view_as_real(c), torch.view_as_real(r)
        t = torch.view_as_real(t) if t is not None and t.is_complex() else None
    if not c.is_floating_point():
        if torch.equal(c, r):
            return OutputComparison(True, "", max_abs_error=0.0, mismatch_fraction=0.0)
        if index_source is not None:
            return compare_index_output(c, r, index_source, atol, rtol)
        bad = (c != r).flatten()
        first = int(bad.nonzero()[0])
        return OutputComparison(
            False,
            f"integer output differs (exact comparison): {float(bad.double().mean()):.2%} of elements, first at "
            f"{_index_list(first, c.shape)} ({c.flatten()[first].item()} vs {r.flatten()[first].item()})",
            max_abs_error=float((c.double() - r.double()).abs().max()),
            mismatch_fraction=float(bad.double().mean()),
            first_bad_index=_index_list(first, c.shape),
        )
    if c.device.type == "cuda" and compare_fused.usable(c, r, t):
        fused = _compare_fused(c, r, t, atol, rtol)
        if fused is not None:
            return fused
    return _compare_floats(c, r, t, atol, rtol)


CHUNK = 1 << 25  # elements per PyTorch pass: float64 temporaries of 256 MB, whatever the output's size


def _compare_floats(c: torch.Tensor, r: torch.Tensor, t: torch.Tensor | Correction | None, atol: float,
                    rtol: float) -> OutputComparison:
    """The figures in float64, a chunk of CHUNK elements at a time (an output of GBs would need several
    float64 copies of itself at once), merged: maxima, counts and first positions."""
    cf, rf = c.reshape(-1), r.reshape(-1)  # logical order (a copy where the tensor is not contiguous)
    corrected = isinstance(t, Correction)  # the truth is rf + this, in float64
    tf = (t.correction if corrected else t).reshape(-1) if t is not None else None
    n = cf.numel()
    max_abs, any_finite_diff, max_rel = 0.0, n == 0, None
    mismatches, first_bad, nonfinite_count, first_nonfinite = 0, None, 0, None
    ratio_c = ratio_r = 0.0
    for begin in range(0, n, CHUNK):
        cd, rd = cf[begin:begin + CHUNK].double(), rf[begin:begin + CHUNK].double()
        if bool(torch.isfinite(cd).all()) and bool(torch.isfinite(rd).all()):  # the common case, in few passes
            size = rd.abs()
            diff = (cd - rd).abs_()
            close = diff <= size * rtol + atol
            max_abs, any_finite_diff = max(max_abs, float(diff.max())), True
            significant = size > atol
            if bool(significant.any()):
                rel = float(torch.where(significant, diff / size, 0.0).max())
                max_rel = rel if max_rel is None else max(max_rel, rel)
            del size, significant
        else:
            nonfinite = ~torch.isfinite(cd) & torch.isfinite(rd)
            count = int(nonfinite.sum())
            if count and first_nonfinite is None:
                first_nonfinite = begin + int(nonfinite.nonzero()[0])
            nonfinite_count += count
            del nonfinite
            diff = (cd - rd).abs()
            diff = torch.where(torch.isnan(cd) & torch.isnan(rd), torch.zeros_like(diff), diff)
            close = torch.isclose(cd, rd, atol=atol, rtol=rtol, equal_nan=True)
            finite_diff = diff[torch.isfinite(diff)]
            if finite_diff.numel():
                max_abs, any_finite_diff = max(max_abs, float(finite_diff.max())), True
            significant = rd.abs() > atol
            if bool(significant.any()):
                rel = diff[significant] / rd.abs()[significant]
                rel = rel[torch.isfinite(rel)]
                if rel.numel():
                    max_rel = float(rel.max()) if max_rel is None else max(max_rel, float(rel.max()))
        bad = int((~close).sum())
        if bad and first_bad is None:
            first_bad = begin + int((~close).nonzero()[0])
        mismatches += bad
        if tf is not None:
            td = tf[begin:begin + CHUNK].double()
            if corrected:
                td += rd
            ratio_c = max(ratio_c, error_ratio(cd, td, atol, rtol))
            ratio_r = max(ratio_r, error_ratio(rd, td, atol, rtol))
        del cd, rd, diff, close
    result = OutputComparison(passed=False, max_abs_error=max_abs if any_finite_diff else float("inf"),
                              max_rel_error=max_rel, mismatch_fraction=mismatches / n if n else 0.0)
    if tf is not None:
        result.error_ratio_candidate, result.error_ratio_reference = ratio_c, ratio_r
    if first_nonfinite is not None:
        result.first_bad_index = _index_list(first_nonfinite, c.shape)
        result.message = (
            f"NaN/Inf where the reference is finite: {nonfinite_count} element(s), first at {result.first_bad_index} "
            f"({float(cf[first_nonfinite])} vs {float(rf[first_nonfinite])})"
        )
        return result
    return _decide(result, first_bad, c, r, atol)


def _compare_fused(c: torch.Tensor, r: torch.Tensor, t: torch.Tensor | Correction | None, atol: float,
                   rtol: float) -> OutputComparison | None:
    """The same figures in one pass on the GPU (kfoundry.evaluate.reference.compare_fused); None where a value is
    not finite or the kernel cannot run: the PyTorch passes decide those."""
    try:
        figures = compare_fused.fused_figures(c, r, t, atol, rtol)
    except Exception:  # no Triton, or a device it cannot compile for: the exact PyTorch path
        return None
    if figures.nonfinite:
        return None
    result = OutputComparison(passed=False, max_abs_error=figures.max_abs, max_rel_error=figures.max_rel,
                              mismatch_fraction=figures.mismatches / figures.count,
                              error_ratio_candidate=figures.ratio_candidate,
                              error_ratio_reference=figures.ratio_reference)
    return _decide(result, figures.first_mismatch, c, r, atol)


def _decide(result: OutputComparison, first: int | None, c: torch.Tensor, r: torch.Tensor,
            atol: float) -> OutputComparison:
    """Pass when every element is close (first is None), or when the candidate is as close to the truth
    as the reference is; otherwise the message names the first element outside the tolerance."""
    if first is None:
        result.passed = True
        return result
    result.first_bad_index = _index_list(first, c.shape)
    if result.error_ratio_candidate is not None:
        limit = max(1.0, 2.0 * result.error_ratio_reference)
        if result.error_ratio_candidate <= limit:
            result.passed = True
            result.message = (
                f"differs from the PyTorch reference but is as close to the float64 truth: "
                f"e(candidate)={result.error_ratio_candidate:.3g} <= max(1, 2*e(reference)={result.error_ratio_reference:.3g})"
            )
            return result
    got, want = float(c.reshape(-1)[first]), float(r.reshape(-1)[first])
    result.message = (
        f"values off: max abs error {result.max_abs_error:.3g}, {result.mismatch_fraction:.2%} of elements outside "
        f"atol=rtol={atol:g}, first at {result.first_bad_index} ({got:.6g} vs reference {want:.6g})"
    )
    if result.error_ratio_candidate is not None:
        result.message += (
            f"; against the float64 truth e(candidate)={result.error_ratio_candidate:.3g}, "
            f"e(reference)={result.error_ratio_reference:.3g}"
        )
    return result


def compare_value(c: Any, r: Any, atol: float, rtol: float) -> OutputComparison:
    """Non-tensor outputs (Python numbers and the like)."""
    if isinstance(r, float) and isinstance(c, (int, float)):
        ok = abs(c - r) <= atol + rtol * abs(r) or (c != c and r != r)
    else:
        ok = type(c) is type(r) and c == r
    return OutputComparison(ok, "" if ok else f"value {c!r} but the reference's is {r!r}")


def _on(device: str | None, value: Any) -> Any:
    return value.to(device) if device is not None and isinstance(value, (torch.Tensor, Correction)) else value


def compare_outputs(
    candidate: Any, reference: Any, truth: Any | None, atol: float, rtol: float,
    index_sources: dict[int, IndexSource] | None = None, device: str | None = None,
) -> Comparison:
    """`device`: where the arithmetic runs (None: where the tensors are). On a GPU the dozen float64
    passes over outputs of hundreds of MB take milliseconds instead of seconds; the figures are the
    same (IEEE float64 arithmetic, exact maxima and counts)."""
    cand, ref = flatten_outputs(candidate), flatten_outputs(reference)
    tru = flatten_outputs(truth) if truth is not None else None
    if tru is not None and len(tru) != len(ref):
        tru = None
    if len(cand) != len(ref):
        return Comparison(False, f"forward returned {len(cand)} output(s) but the reference returns {len(ref)}")
    results: list[OutputComparison] = []
    for i, (c, r) in enumerate(zip(cand, ref)):
        if isinstance(r, torch.Tensor):
            if not isinstance(c, torch.Tensor):
                result = OutputComparison(False, f"{_describe(c)} where the reference returns {_describe(r)}")
            else:
                t = tru[i] if tru is not None and isinstance(tru[i], (torch.Tensor, Correction)) else None
                source = (index_sources or {}).get(i)
                if device is not None and source is not None:
                    source = IndexSource(_on(device, source.values), source.dim, source.keepdim)
                result = compare_tensor(_on(device, c), _on(device, r), _on(device, t), atol, rtol, source)
        else:
            result = compare_value(c, r, atol, rtol)
        results.append(result)
        if not result.passed:
            where = f"output {i}: " if len(ref) > 1 else ""
            return Comparison(False, where + result.message, results, failed_output=i)
    notes = [f"output {i}: {o.message}" if len(ref) > 1 else o.message for i, o in enumerate(results) if o.message]
    return Comparison(True, "; ".join(notes), results)
