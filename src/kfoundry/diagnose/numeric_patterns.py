"""The shapes a wrong output's error takes (kfoundry.diagnose.numeric): `find_patterns` runs every
detector and keeps the patterns the data clearly support, most confident first.

The location detectors (kfoundry.diagnose.numeric_location) say where the errors are; these say what
they are: a transposed write, a missing factor or constant, a per-channel bias or per-row factor,
untouched or zeroed memory, reduced-precision arithmetic, or an error everywhere. The costlier ones
look at a random sample of large outputs.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch

from kfoundry.diagnose.numeric_data import (FIX_PASS, MIN_STRUCTURED, PROBE_SIZE, OutputData, fmt, num, pattern,
                                            ranges, unravel)
from kfoundry.diagnose.numeric_location import (nonfinite_pattern, periodic_pattern, slices_pattern, tail_pattern,
                                                tile_pattern)

# factors a kernel commonly misses or doubles, by name
_NAMED_FACTORS = ([(float(k), f"{k}") for k in range(2, 1025)]
                  + [(1.0 / k, f"1/{k}") for k in range(2, 1025)]
                  + [(math.sqrt(k), f"sqrt({k})") for k in range(2, 4097) if math.isqrt(k) ** 2 != k]
                  + [(1.0 / math.sqrt(k), f"1/sqrt({k})") for k in range(2, 4097) if math.isqrt(k) ** 2 != k]
                  + [(-1.0, "-1"), (math.log2(math.e), "log2(e)"), (math.log(2), "ln(2)"), (math.e, "e"),
                     (1 / math.e, "1/e"), (math.pi, "pi"), (1 / math.pi, "1/pi")])


def _permuted_at(flat: torch.Tensor, shape: list[int], perm: tuple[int, ...], positions: torch.Tensor) -> torch.Tensor:
    """flat.view(shape).permute(perm).reshape(-1)[positions], without materialising the permutation."""
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    source = torch.zeros_like(positions)
    rest = positions.clone()
    for k in reversed(range(len(perm))):
        size = shape[perm[k]]
        source += (rest % size) * strides[perm[k]]
        rest //= size
    return flat[source]


def _transposed(x: OutputData) -> dict | None:
    """The candidate is the reference with dims permuted: in the same shape (a square transpose), or its
    memory holds the permuted reference flattened (a store with another layout's strides)."""
    dims = [d for d, s in enumerate(x.shape) if s > 1]
    if len(dims) < 2 or len(dims) > 5:
        return None
    shape = [x.shape[d] for d in dims]
    off = x.off_positions()
    if off.numel() < 4:
        return None
    probe = off[torch.linspace(0, off.numel() - 1, min(PROBE_SIZE, off.numel())).long()]
    swaps = [p for p in itertools.permutations(range(len(dims))) if sum(i != v for i, v in enumerate(p)) == 2]
    others = [p for p in itertools.permutations(range(len(dims))) if sum(i != v for i, v in enumerate(p)) > 2]
    for perm in swaps + others:
        if float(x.close(x.c[probe], _permuted_at(x.r, shape, perm, probe)).double().mean()) < 0.95:
            continue
        if x.sample is None:
            still_off = int((~x.close(x.c, x.r.view(shape).permute(perm).reshape(-1))).count_nonzero())
            checked = x.numel
        else:
            still_off = int((~x.close(x.c[x.sample], _permuted_at(x.r, shape, perm, x.sample))).count_nonzero())
            checked = x.sample.numel()
        if still_off > 0.01 * checked or still_off > 0.1 * x.count_off * checked / x.numel:
            continue
        permuted = [shape[p] for p in perm]
        moved = [dims[i] for i, p in enumerate(perm) if p != i]
        data = {"permutation": [dims[p] for p in perm], "dims": moved, "square": permuted == shape,
                "permuted_shape": permuted, "still_off": still_off, "checked": checked}
        if permuted == shape:
            text = (f"the candidate equals the reference with dims {moved} swapped "
                    f"({checked - still_off} of {checked} elements match): it writes out[j, i] where out[i, j] belongs")
        else:
            text = (f"the candidate's memory holds the reference permuted (dims {moved}, as a {permuted} tensor) and "
                    f"flattened ({checked - still_off} of {checked} elements match): the store used the strides of "
                    f"a {permuted} layout instead of the output's {list(x.shape)}")
        return pattern("transposed", text, 1.0 - still_off / checked, data)
    return None


def _name_factor(a: float) -> str | None:
    best = min(_NAMED_FACTORS, key=lambda item: abs(item[0] - a) / abs(item[0]))
    return best[1] if abs(best[0] - a) <= 2e-3 * abs(best[0]) else None


def _algebraic(x: OutputData) -> dict | None:
    """candidate = a * reference, reference + b, or a * reference + b where it is off (everywhere, or in
    the off region only): fitted on the off elements, kept when undoing it makes them pass."""
    _, cb, rb = x.values(off_only=True)
    if cb.numel() < 8:
        return None
    _, ca, ra = x.values(off_only=False)
    spread = float(rb.std()) if rb.numel() > 1 else 0.0
    varies = spread > 1e-9 * (float(rb.abs().mean()) + 1e-300)  # else a factor and a constant look alike
    fits = [(1.0, float((cb - rb).mean()))]
    if varies:
        rr = float((rb * rb).sum())
        fits.append((float((cb * rb).sum()) / rr if rr else 0.0, 0.0))
        design = torch.stack([rb, torch.ones_like(rb)], dim=1)
        fits.append(tuple(torch.linalg.lstsq(design, cb.unsqueeze(1)).solution.flatten().tolist()))
    error = float((cb - rb).square().mean().sqrt())
    for a, b in fits:
        if (a == 1.0 and abs(b) <= x.atol) or (a != 1.0 and (abs(a) < 1e-6 or abs(a - 1.0) < 1e-6)):
            continue
        corrected = (cb - b) / a
        # a tight fit: what is left is rounding, not the noise of lower-precision arithmetic
        if float((corrected - rb).square().mean().sqrt()) > 0.1 * error / max(abs(a), 1.0):
            continue
        fixed = x.pass_fraction(corrected, rb)
        if fixed < FIX_PASS:
            continue
        scope = "everywhere" if x.pass_fraction((ca - b) / a, ra) >= FIX_PASS else "off-elements"
        where = ("everywhere" if scope == "everywhere" else
                 f"on the {x.count_off} off elements ({x.count_off / x.numel:.1%}; the rest is right)")
        data = {"scope": scope, "fixed_fraction": num(fixed), "fit_elements": int(cb.numel())}
        if a == 1.0:
            data.update(offset=num(b))
            text = (f"candidate ≈ reference {'+' if b >= 0 else '-'} {abs(b):.6g} {where}: a missing or extra "
                    f"constant (bias, eps, init value) {b:.6g}; subtracting it makes {fixed:.1%} pass")
            return pattern("offset", text, 0.95 * fixed, data)
        name = _name_factor(a)
        named = f" (= {name})" if name and name != f"{a:.6g}" else ""
        pivot = b / (1.0 - a) if abs(b) > x.atol else None
        data.update(factor=num(a), named=name, offset=num(b), pivot=num(pivot) if pivot is not None else None)
        if pivot is None:
            text = (f"candidate ≈ {a:.6g}{named} × reference {where}: a missing or extra factor {a:.6g}; dividing "
                    f"by it makes {fixed:.1%} of those elements pass")
        else:
            text = (f"candidate ≈ {a:.6g}{named} × reference {'+' if b >= 0 else '-'} {abs(b):.6g} {where}, i.e. "
                    f"candidate − {pivot:.6g} ≈ {a:.6g} × (reference − {pivot:.6g}): a factor {a:.6g} is missing or "
                    f"extra on what is computed before a constant {pivot:.6g} is added; undoing it makes "
                    f"{fixed:.1%} pass")
        if name == "-1":
            text += "; a flipped sign"
        return pattern("scale", text, 0.95 * fixed, data)
    return None


def _along_dim(x: OutputData) -> dict | None:
    """candidate - reference, or candidate / reference, depends only on the index along one dim: a
    per-channel bias, or a per-row factor (a softmax denominator, a norm's 1/rms)."""
    positions, ca, ra = x.values(off_only=False)
    pos = positions if positions is not None else torch.arange(x.numel)
    off = ~x.close(ca, ra)
    off_count = int(off.count_nonzero())
    if off_count < 8:
        return None
    best = None
    for dim, n in enumerate(x.shape):
        if n < 2 or ca.numel() < 4 * n:
            continue
        index = (pos // math.prod(x.shape[dim + 1:])) % n
        counts = torch.bincount(index, minlength=n).clamp(min=1)
        offsets = torch.bincount(index, weights=ca - ra, minlength=n) / counts
        rr = torch.bincount(index, weights=ra * ra, minlength=n)
        factors = torch.bincount(index, weights=ca * ra, minlength=n) / rr.clamp(min=1e-300)
        factors = torch.where((rr > 0) & (factors.abs() > 1e-12), factors, 1.0)
        for kind, profile, corrected in (("offset-along-dim", offsets, ca - offsets[index]),
                                         ("scale-along-dim", factors, ca / factors[index])):
            if not x.likely_passes(corrected, ra):
                continue
            passing = x.close(corrected, ra)
            fixed = float(passing.double().mean())
            still_off = int((off & ~passing).count_nonzero())
            if fixed >= FIX_PASS and still_off <= 0.1 * off_count and (best is None or fixed > best[0]):
                best = (fixed, kind, dim, n, profile)
    if best is None:
        return None
    fixed, kind, dim, n, profile = best
    neutral = 0.0 if kind == "offset-along-dim" else 1.0
    tolerance = x.atol + x.rtol * float(ra.abs().mean()) if kind == "offset-along-dim" else x.rtol
    differing = ((profile - neutral).abs() > tolerance).nonzero().flatten().tolist()
    first = [num(v) for v in profile[:8].tolist()]
    data = {"dim": dim, "size": n, "profile": first, "profile_min": num(profile.min()),
            "profile_max": num(profile.max()), "differing_indices": differing[:16], "differing_count": len(differing),
            "fixed_fraction": num(fixed)}
    shown = f"{first}{' ...' if n > 8 else ''}"
    if kind == "offset-along-dim":
        text = (f"candidate − reference depends only on the index along dim {dim} (size {n}): v[i] = {shown}; "
                f"subtracting it makes {fixed:.1%} pass. A per-index term (bias, shift) is missing (v = −term) or "
                "extra (v = +term)")
    else:
        text = (f"candidate / reference depends only on the index along dim {dim} (size {n}): s[i] = {shown}; "
                f"dividing by it makes {fixed:.1%} pass. A per-index factor is wrong: a normalisation (softmax "
                "denominator, a norm's 1/rms) computed from part of the data, or a per-channel weight")
    if len(differing) < n:
        text += f"; only indices {ranges(differing)} differ ({len(differing)} of {n})"
    return pattern(kind, text, 0.9 * fixed, data)


def _fill(x: OutputData, structure: list[str]) -> dict | None:
    """The off elements all hold 0, NaN (the evaluator's poison for unwritten memory) or one constant."""
    values = x.c[x.off_positions()]
    if not values.numel():
        return None
    share = x.count_off / x.numel
    where = f" ({', '.join(structure)})" if structure else ""
    nan = float(torch.isnan(values).double().mean())
    zero = float((values == 0).double().mean())
    if nan >= 0.9:
        text = (f"{nan:.0%} of the {x.count_off} off elements{where} hold NaN, the evaluator's fill for output "
                "memory: most likely never written by the kernel (or a NaN it computed there)")
        return pattern("untouched", text, 0.9 * nan,
                       {"fraction": num(nan), "fill": "nan", "share_of_output": num(share)})
    if zero >= 0.9:
        text = (f"{zero:.0%} of the {x.count_off} off elements{where} hold exactly 0: a zero-initialised output "
                "never written there, or a masked load's other=0 flowing into the store")
        if share >= 0.9:
            text += "; that is the whole output: no store reached it"
        return pattern("zeros", text, 0.9 * zero,
                       {"fraction": num(zero), "fill": 0.0, "share_of_output": num(share)})
    value = float(values[0])
    same = float((values == value).double().mean()) if math.isfinite(value) else 0.0
    if same >= 0.9 and values.numel() >= 4:
        text = (f"{same:.0%} of the {x.count_off} off elements{where} hold the same value {value:.6g}: "
                "a constant written in place of the result (an init value, a masked load's other=)")
        return pattern("constant", text, 0.9 * same,
                        {"fraction": num(same), "fill": num(value), "share_of_output": num(share)})
    return None


def _precision(x: OutputData) -> dict | None:
    """A small error spread evenly over most elements: lower-precision arithmetic, judged by the truth."""
    if not x.all_finite:
        return None
    positions, ca, ra = x.values(off_only=False)
    diff = ca - ra
    rms_d, rms_r = float(diff.square().mean().sqrt()), float(ra.square().mean().sqrt())
    if not rms_r or not rms_d:
        return None
    level = rms_d / rms_r
    spread = float((diff != 0).double().mean())
    peak = float(diff.abs().max()) / rms_d
    # rounding changes nearly every element, by a similar relative amount
    small = 2e-5 <= level <= 2e-2 and spread >= 0.9 and peak <= 25
    data: dict[str, Any] = {"relative_rms_error": num(level), "nonzero_fraction": num(spread), "peak_to_rms": num(peak)}
    if x.truth is not None:
        ta = x.take(x.truth, positions)
        e_c, e_r = float((ca - ta).square().mean().sqrt()), float((ra - ta).square().mean().sqrt())
        data.update(candidate_rms_vs_truth=num(e_c), reference_rms_vs_truth=num(e_r))
        if e_c <= e_r:
            text = (f"the candidate is closer to the float64 truth than the reference (rms error {e_c:.3g} vs "
                    f"{e_r:.3g}): the reference is the imprecise one here, not the kernel")
            return pattern("reference-precision", text, 0.9, data)
        if not small or e_c < 3 * e_r:
            return None
        judged = f"the float64 truth confirms it: rms error {e_c:.3g} vs the reference's {e_r:.3g}"
    elif small:
        judged = "no float64 truth was available to confirm it"
    else:
        return None
    label = "TF32 or fp16 (10-bit mantissa)" if level <= 1.5e-3 else "bf16 (7-bit mantissa)"
    data["consistent_with"] = label
    text = (f"a small error spread over {spread:.0%} of the elements (rms {level:.2g} of the output's rms, peak "
            f"{peak:.1f}× the rms), at the level of {label} arithmetic; {judged}")
    return pattern("reduced-precision", text, 0.9 if x.truth is not None else 0.5, data)


def _everywhere(x: OutputData) -> dict:
    _, ca, ra = x.values(off_only=False)
    share = x.count_off / x.numel
    correlation = None
    if ca.numel() > 1 and float(ca.std()) > 0 and float(ra.std()) > 0:
        correlation = num(torch.corrcoef(torch.stack([ca, ra]))[0, 1])
    rms_r = float(ra.square().mean().sqrt()) if ra.numel() else 0.0
    level = num(float((ca - ra).square().mean().sqrt()) / rms_r) if rms_r else None
    data = {"fraction": num(share), "correlation": correlation, "relative_rms_error": level}
    if share >= 0.5:
        text = (f"{share:.0%} of the elements are off with no boundary, periodic or algebraic structure "
                f"(correlation with the reference {fmt(correlation, '.2f')}, rms error {fmt(level, '.3g')} of the "
                "reference's rms): the computation itself is wrong")
        if correlation is not None and correlation >= 0.9:
            text += ("; the values track the reference, so part of the computation is right: a missing or extra "
                     "term (a reduction's last block, a skipped input element)")
        elif correlation is not None and abs(correlation) < 0.3:
            text += "; the values are unrelated to the reference: wrong indexing (strides, offsets, pointers)"
        return pattern("everywhere", text, 0.5, data)
    first = [unravel(int(i), x.shape) for i in x.off_positions()[:8]]
    data["first_indices"] = first
    text = (f"{x.count_off} elements ({share:.2%}) off at scattered positions with no boundary, periodic or "
            f"algebraic structure, first at {first[:4]}")
    return pattern("scattered", text, 0.3, data)


def find_patterns(x: OutputData) -> list[dict[str, Any]]:
    """Every pattern the data clearly support, most confident first."""
    patterns: list[dict[str, Any]] = []
    for detector in (_transposed, _algebraic):
        found = detector(x)
        if found:
            patterns.append(found)
            break
    if not patterns and (found := _along_dim(x)):
        patterns.append(found)
    nonfinite = nonfinite_pattern(x)
    if nonfinite:
        patterns.append(nonfinite)
    location: list[dict[str, Any]] = []
    if x.numel >= MIN_STRUCTURED:
        tail = tail_pattern(x)
        periodic = periodic_pattern(x)
        skip = {d for p in (tail, periodic) if p and (d := p["data"]["dim"]) is not None}
        location = [p for p in (tail, periodic, tile_pattern(x), slices_pattern(x, skip)) if p]
    patterns += location
    fill = _fill(x, [p["kind"] for p in location])
    if fill:
        patterns.append(fill)
    if not patterns:
        precision = _precision(x)
        if precision:
            patterns.append(precision)
    if not patterns or all(p["kind"] == "nonfinite" for p in patterns) and nonfinite["data"]["count"] < x.count_off / 2:
        patterns.append(_everywhere(x))
    order = {id(p): i for i, p in enumerate(patterns)}
    return sorted(patterns, key=lambda p: (-p["confidence"], order[id(p)]))
