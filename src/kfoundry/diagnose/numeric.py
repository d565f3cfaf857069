"""What a wrong output looks like, as evidence the next fixer can act on.

`error_pattern(candidate, reference, atol, rtol, truth)` compares in float64 and returns a plain
JSON dict: the shape and dtype, the error statistics (and against the float64 truth), a shape or
dtype mismatch with a hint, and the recognised patterns (kfoundry.diagnose.numeric_location and
numeric_patterns): NaN, a missed tail, wrong slices, a periodic defect at block boundaries, a wrong
tile, a missing factor or bias, a transposed write, untouched or zeroed memory, reduced-precision
arithmetic, an error everywhere. `nondeterminism(first, second)` compares two runs of one candidate on the same inputs.
`pattern_findings` and `race_findings` (kfoundry.diagnose.numeric_findings) turn both into
DiagnosticFindings.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kfoundry.diagnose.numeric_data import (SAMPLE_LIMIT, SAMPLE_SIZE, OutputData, ceil_block, floor_block, num,
                                            pow2_factor, unravel)
from kfoundry.diagnose.numeric_findings import pattern_findings, race_findings
from kfoundry.diagnose.numeric_patterns import find_patterns

__all__ = ["error_pattern", "nondeterminism", "pattern_findings", "race_findings"]

FIRST_OFF_SHOWN = 5
VALUES_CHECK_LIMIT = 1 << 22  # a reshaped or transposed output's values are compared up to this size
REPEAT_CHUNK = 1 << 25  # elements of two runs compared in float64 at once
DEFAULT_REPEAT_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 1e-2}  # else 1e-4 (fp32 and wider)


def _as_float64(x: torch.Tensor) -> torch.Tensor:
    x = x.detach().cpu()
    if x.is_complex():
        x = torch.view_as_real(x)
    return x.reshape(-1).to(torch.float64)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _first_true(mask: torch.Tensor, count: int = 1) -> list[int]:
    """The flat positions of the first `count` True values of a flat bool tensor."""
    if not mask.numel() or not bool(mask.any()):
        return []
    start = int(torch.argmax(mask.view(torch.uint8)))
    found: list[int] = []
    step = 1 << 16
    while len(found) < count and start < mask.numel():
        found += (mask[start:start + step].nonzero().flatten() + start).tolist()
        start += step
    return found[:count]


def _mismatch_hint(cshape: tuple[int, ...], rshape: tuple[int, ...], c: torch.Tensor, r: torch.Tensor,
                   atol: float, rtol: float) -> tuple[list[str], list[str]]:
    """(kinds, sentences) explaining how a candidate's shape came to differ from the reference's."""
    kinds, texts = [], []
    cn, rn = math.prod(cshape), math.prod(rshape)
    if cn == rn:
        kinds.append("same-numel")
        texts.append(f"same number of elements ({rn}): a view/reshape or a stride bug, not missing work")
        if sorted(cshape) == sorted(rshape) and len(cshape) == len(rshape):
            swapped = [i for i in range(len(rshape)) if cshape[i] != rshape[i]]
            kinds.append("transposed-shape")
            texts.append(f"the reference's shape with dims {swapped} permuted: the output was allocated transposed")
        if cn and cn <= VALUES_CHECK_LIMIT:
            cv, rv = _as_float64(c), _as_float64(r)
            if cv.numel() == rv.numel() and bool(torch.isclose(cv, rv, atol=atol, rtol=rtol, equal_nan=True).all()):
                kinds.append("values-in-order")
                texts.append("the values are right in memory order: only the returned shape is wrong "
                             f"(return .view{tuple(rshape)})")
            elif len(rshape) == 2 and tuple(cshape) == (rshape[1], rshape[0]) and bool(torch.isclose(
                    cv.view(cshape).t().reshape(-1), rv, atol=atol, rtol=rtol, equal_nan=True).all()):
                kinds.append("values-transposed")
                texts.append("the values are the reference's transposed: return the transpose, or index the "
                             "output as [row, column]")
    if len(cshape) == len(rshape):
        differing = [i for i in range(len(rshape)) if cshape[i] != rshape[i]]
        if len(differing) == 1:
            dim = differing[0]
            cs, rs = cshape[dim], rshape[dim]
            if cs < rs and cs and (block := floor_block(rs, cs, smallest=16)):
                kinds.append("rounded-down")
                texts.append(f"dim {dim} is {cs} instead of {rs}: {rs} rounded down to a multiple of {block} "
                             f"(floor division n // BLOCK; use triton.cdiv)")
            elif cs > rs and (block := ceil_block(rs, cs)):
                kinds.append("rounded-up")
                texts.append(f"dim {dim} is {cs} instead of {rs}: {rs} rounded up to a multiple of {block} "
                             f"(the padded size leaked into the output: allocate {rs}, or slice [:{rs}])")
            elif abs(cs - rs) == 1:
                kinds.append("off-by-one")
                texts.append(f"dim {dim} is {cs} instead of {rs}: off by one (an output-size formula: "
                             "padding, stride, dilation, or a +1)")
            else:
                kinds.append("one-dim")
                texts.append(f"dim {dim} is {cs} instead of {rs}")
    else:
        csq, rsq = [s for s in cshape if s != 1], [s for s in rshape if s != 1]
        if csq == rsq:
            kinds.append("size-one-dims")
            texts.append("differs only in dims of size 1: a missing or extra keepdim/unsqueeze/squeeze")
        elif len(cshape) + 1 == len(rshape) and any(
                list(rshape[:i]) + list(rshape[i + 1:]) == list(cshape) for i in range(len(rshape))):
            kinds.append("missing-dim")
            texts.append("the reference's shape less one dim: a reduction over a dim the reference keeps")
        elif len(cshape) == len(rshape) + 1 and any(
                list(cshape[:i]) + list(cshape[i + 1:]) == list(rshape) for i in range(len(cshape))):
            kinds.append("extra-dim")
            texts.append("the reference's shape plus one dim: a reduction the reference does is missing")
    if not texts:
        texts.append(f"{cn} elements where the reference has {rn}")
    return kinds, texts  # the most specific last


def _stats(data: OutputData, truth: torch.Tensor | None) -> dict[str, Any]:
    c, r, diff, atol = data.c, data.r, data.diff, data.atol
    usable = None if data.all_finite else torch.isfinite(diff)
    usable_count = data.numel if usable is None else int(usable.count_nonzero())
    finite_diff = diff if usable is None else torch.where(usable, diff, 0.0)
    at = int(torch.argmax(finite_diff)) if usable_count else None
    stats: dict[str, Any] = {
        "count": data.numel,
        "count_off": data.count_off,
        "fraction_off": num(data.count_off / data.numel) if data.numel else 0.0,
        "max_abs": num(finite_diff[at]) if at is not None else 0.0,
        "mean_abs": num(finite_diff.sum() / usable_count) if usable_count else 0.0,
        "max_rel": None,
        "mean_rel": None,
        "nonfinite_count": 0 if data.all_finite else int(data.nonfinite.count_nonzero()),
    }
    if at is not None:
        stats["max_abs_at"] = unravel(at, data.shape)
    ignored = data.r_abs <= atol  # relative errors only where |reference| > atol
    if usable is not None:
        ignored |= ~usable
    significant_count = data.numel - int(ignored.count_nonzero())
    if significant_count:
        rel = diff.div(data.r_abs).masked_fill_(ignored, 0.0)
        stats["max_rel"], stats["mean_rel"] = num(rel.max()), num(rel.sum() / significant_count)
    stats["first_off"] = [{"index": unravel(i, data.shape), "candidate": num(c[i]), "reference": num(r[i])}
                          for i in _first_true(data.bad, FIRST_OFF_SHOWN)]
    if truth is not None:
        stats["truth"] = _truth_errors(c, r, truth, atol, data.rtol)
    return stats


def _truth_errors(c: torch.Tensor, r: torch.Tensor, t: torch.Tensor, atol: float, rtol: float) -> dict[str, Any]:
    """The candidate's and the reference's errors against the float64 truth: max/mean abs and
    e(x) = max |x - t| / (atol + rtol |t|), NaN/Inf agreeing with the truth counting as exact."""
    scale = t.abs().nan_to_num_(nan=0.0, posinf=0.0).mul_(rtol).add_(atol)
    out: dict[str, Any] = {}
    for name, x in (("candidate", c), ("reference", r)):
        diff = (x - t).abs_()
        finite = None
        if not math.isfinite(float(diff.sum())):
            agree = (torch.isnan(x) & torch.isnan(t)) | (torch.isinf(x) & (x == t))
            diff.masked_fill_(agree, 0.0)
            finite = torch.isfinite(diff)
        usable = diff.numel() if finite is None else int(finite.count_nonzero())
        finite_diff = diff if finite is None else torch.where(finite, diff, 0.0)
        # not in place: finite_diff may be diff itself, and its max is the max abs error, not the ratio
        e = float(diff.div(scale).nan_to_num_(nan=math.inf).max()) if diff.numel() else 0.0
        out.update({
            f"{name}_max_abs": num(finite_diff.max()) if usable else 0.0,
            f"{name}_mean_abs": num(finite_diff.sum() / usable) if usable else 0.0,
            f"{name}_error_ratio": num(e),  # None when infinite (NaN/Inf where the truth is finite)
            f"{name}_nonfinite": diff.numel() - usable,
        })
    return out


def error_pattern(candidate: torch.Tensor, reference: torch.Tensor, atol: float, rtol: float,
                  truth: torch.Tensor | None = None) -> dict[str, Any]:
    """What the candidate's error looks like against the reference (see the module docstring).

    Keys: shape, dtype, reference_shape, reference_dtype, tolerance {atol, rtol}, stats (None when the
    shapes differ), mismatch (None, or {kind: "shape"|"dtype", candidate_*, reference_*, hint,
    hint_kinds, hints}), patterns (list of {kind, description, confidence, data}, most confident
    first; empty on a mismatch) and sampled (None, or {size, of, note} when the costlier checks ran on
    a random sample of a large output).
    """
    cshape, rshape = tuple(candidate.shape), tuple(reference.shape)
    result: dict[str, Any] = {
        "shape": list(cshape), "dtype": _dtype_name(candidate.dtype),
        "reference_shape": list(rshape), "reference_dtype": _dtype_name(reference.dtype),
        "tolerance": {"atol": float(atol), "rtol": float(rtol)},
        "stats": None, "mismatch": None, "patterns": [], "sampled": None,
    }
    if cshape != rshape:
        kinds, texts = _mismatch_hint(cshape, rshape, candidate, reference, atol, rtol)
        result["mismatch"] = {"kind": "shape", "candidate_shape": list(cshape), "reference_shape": list(rshape),
                              "hint": texts[-1], "hint_kinds": kinds, "hints": texts}
        return result
    c, r = _as_float64(candidate), _as_float64(reference)
    shape = cshape + ((2,) if candidate.is_complex() else ())
    t = None
    if truth is not None and truth.numel() == r.numel():
        t = _as_float64(truth)
    data = OutputData.build(shape, c, r, atol, rtol, t)
    result["stats"] = _stats(data, t)
    if candidate.dtype != reference.dtype:
        cname, rname = _dtype_name(candidate.dtype), _dtype_name(reference.dtype)
        narrower = (candidate.is_floating_point() and reference.is_floating_point()
                    and torch.finfo(candidate.dtype).bits < torch.finfo(reference.dtype).bits)
        hint = (f"the output is {cname} where the reference returns {rname}: allocate it with the reference's "
                f"dtype (torch.empty(..., dtype=x.dtype)) and cast in the kernel before the store")
        if narrower:
            hint += f"; {cname} also loses precision the reference keeps"
        result["mismatch"] = {"kind": "dtype", "candidate_dtype": cname, "reference_dtype": rname,
                              "hint": hint, "hint_kinds": ["dtype"], "hints": [hint]}
        return result
    if data.count_off:
        result["patterns"] = find_patterns(data)
    if data.sample is not None:
        result["sampled"] = {"size": int(data.sample.numel()), "of": data.numel,
                             "note": f"outputs above {SAMPLE_LIMIT} elements: the scale/offset fits, the "
                                     "transposition check, the fill values and the precision estimate ran on "
                                     f"{SAMPLE_SIZE} random elements; the statistics and the location patterns "
                                     "on all"}
    return result


def nondeterminism(first: torch.Tensor, second: torch.Tensor, *, atol: float | None = None,
                   rtol: float | None = None) -> dict[str, Any] | None:
    """Two runs of the same candidate on identical inputs: None when bitwise identical (NaN == NaN).

    Otherwise: count, fraction, first_index, first_values, max_abs, max_rel, max_ulps (of the larger
    magnitude, in units of the dtype's epsilon: a few mean a different summation order, many a race),
    max_scaled (max |a - b| / (1 + |b|): within a tolerance atol = rtol = tau iff <= tau), nonfinite
    (positions where only one run is NaN/Inf), rows (leading index) affected, atol, rtol and
    within_tolerance_of_each_other (default tolerance by dtype: 1e-2 for fp16/bf16, else 1e-4).
    """
    # where the first run is (the judge's GPU): copying two outputs of GBs to the host took seconds and
    # host memory of several times their size, for every candidate, where they are nearly always identical
    a, b = first.detach().contiguous(), second.detach().to(first.device).contiguous()
    if a.shape != b.shape or a.dtype != b.dtype:
        return {"count": None, "fraction": 1.0, "first_shape": list(a.shape), "second_shape": list(b.shape),
                "first_dtype": _dtype_name(a.dtype), "second_dtype": _dtype_name(b.dtype),
                "within_tolerance_of_each_other": False, "max_scaled": None}
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    shape = tuple(a.shape)
    a, b = a.reshape(-1), b.reshape(-1)
    if a.is_floating_point():
        bits = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[a.element_size()]
        differ = (a.view(bits) != b.view(bits)) & ~(torch.isnan(a) & torch.isnan(b))
    else:
        differ = a != b
    count = int(differ.count_nonzero())
    if not count:
        return None
    default = DEFAULT_REPEAT_TOLERANCE.get(a.dtype, 1e-4)
    atol = default if atol is None else atol
    rtol = default if rtol is None else rtol
    eps = torch.finfo(a.dtype).eps if a.is_floating_point() else 1.0
    tiny = torch.finfo(a.dtype).tiny if a.is_floating_point() else 1.0
    figures = {"max_abs": None, "max_rel": None, "max_ulps": None, "max_scaled": None}
    nonfinite, within = 0, True
    # a chunk at a time: every element of a GB-sized output may differ (atomics), and float64 copies of all
    # of them at once would take several times the output's size
    for begin in range(0, a.numel(), REPEAT_CHUNK):
        where = differ[begin:begin + REPEAT_CHUNK]
        if not bool(where.any()):
            continue
        ad = a[begin:begin + REPEAT_CHUNK][where].to(torch.float64)
        bd = b[begin:begin + REPEAT_CHUNK][where].to(torch.float64)
        diff = (ad - bd).abs()
        finite = torch.isfinite(diff)
        fd, size = diff[finite], torch.maximum(ad.abs(), bd.abs())[finite]
        found = {"max_scaled": (diff / (1.0 + bd.abs())).nan_to_num(nan=math.inf).max()}
        if fd.numel():
            found.update(max_abs=fd.max(), max_rel=(fd / size.clamp(min=tiny)).max(),
                         max_ulps=(fd / (size.clamp(min=tiny) * eps)).max())
        for key, value in found.items():
            value = float(value)
            figures[key] = value if figures[key] is None else max(figures[key], value)
        nonfinite += int((~finite).count_nonzero())
        within = within and bool(torch.isclose(ad, bd, atol=atol, rtol=rtol, equal_nan=True).all())
        del ad, bd, diff, finite, fd, size
    first_index = _first_true(differ)[0]
    result: dict[str, Any] = {
        "count": count,
        "fraction": num(count / a.numel()),
        "numel": a.numel(),
        "first_index": unravel(first_index, shape),
        "first_values": [num(a[first_index].double()), num(b[first_index].double())],
        **{key: None if value is None else num(value) for key, value in figures.items()},
        "nonfinite": nonfinite,
        "atol": atol, "rtol": rtol,
        "within_tolerance_of_each_other": within,
    }
    if len(shape) >= 2 and shape[-1]:
        rows = differ.view(-1, shape[-1]).any(dim=1)
        result["rows"] = int(rows.count_nonzero())
        result["rows_total"] = rows.numel()
        result["first_rows"] = rows.nonzero().flatten()[:8].tolist()
    if first_index and (block := pow2_factor(first_index)) >= 16:
        result["first_at_block_boundary"] = block
    return result
