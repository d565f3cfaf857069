"""Where a wrong output's errors are: NaN/Inf, a tail a grid or mask missed, a period of a block size,
a few slices of one dim, a box. Each detector returns a pattern or None when the data do not
clearly support it (kfoundry.diagnose.numeric_patterns combines them)."""

from __future__ import annotations

import math
from typing import Any

import torch

from kfoundry.diagnose.numeric_data import OutputData, floor_block, num, pattern, pow2_factor, ranges, unravel


def _credible(coverage: float, clean: int) -> bool:
    """Off elements densely fill a region, and `clean` good elements before it are unlikely by chance."""
    if coverage < 0.5:
        return False
    return coverage >= 1.0 or clean * math.log(1.0 - coverage) <= math.log(1e-6)


def nonfinite_pattern(x: OutputData) -> dict | None:
    """NaN/Inf where the reference is finite: how many, where the first is, which rows."""
    mask = x.nonfinite
    count = int(mask.count_nonzero()) if mask is not None else 0
    if not count:
        return None
    first = int(torch.argmax(mask.view(torch.uint8)))
    last = x.numel - 1 - int(torch.argmax(mask.flip(0).view(torch.uint8)))
    nan = int((mask & torch.isnan(x.c)).count_nonzero())
    data: dict[str, Any] = {
        "count": count, "fraction": num(count / x.numel), "nan_count": nan, "inf_count": count - nan,
        "first_index": unravel(first, x.shape), "first_flat": first, "last_flat": last,
        "contiguous": last - first + 1 == count, "reaches_end": last == x.numel - 1,
        "block_boundary": pow2_factor(first) if pow2_factor(first) >= 16 else None,
    }
    text = (f"{count} NaN/Inf ({nan} NaN, {count - nan} Inf) where the reference is finite "
            f"({count / x.numel:.1%} of the output), first at {data['first_index']}")
    if data["contiguous"] and count > 1:
        text += f", one contiguous run of flat indices {first}..{last}"
        text += " to the end" if data["reaches_end"] else ""
    if data["block_boundary"]:
        text += f"; flat index {first} is a multiple of {data['block_boundary']} (a block boundary)"
    if len(x.shape) >= 2 and x.shape[-1]:
        rows = mask.view(-1, x.shape[-1]).any(dim=1)
        data["rows"] = int(rows.count_nonzero())
        data["rows_total"] = rows.numel()
        data["first_rows"] = rows.nonzero().flatten()[:8].tolist()
        data["full_rows"] = int(mask.view(-1, x.shape[-1]).all(dim=1).count_nonzero())
        text += f"; in {data['rows']} of {rows.numel()} rows (leading indices flattened)"
    if count - nan:
        data["reference_max_abs_at_inf"] = num(x.r[mask & torch.isinf(x.c)].abs().max())
        text += (f"; the reference is at most {data['reference_max_abs_at_inf']:.4g} in magnitude where the "
                 "candidate is Inf (an overflow)")
    return pattern("nonfinite", text, 1.0, data)


def _evenly_off(density: torch.Tensor, coverage: float) -> bool:
    """At least 90% of the stretches of a region are off at half its overall density or more: the
    region is off throughout, not in alternating or bunched parts."""
    return float((density >= coverage / 2).double().mean()) >= 0.9


def _chunk_density(bad: torch.Tensor, chunks: int = 64) -> torch.Tensor:
    size = -(-bad.numel() // chunks)
    pad = size * chunks - bad.numel()
    padded = torch.cat([bad, bad.new_ones(pad)]) if pad else bad
    return padded.view(torch.uint8).view(chunks, size).sum(dim=1, dtype=torch.float64) / size


def tail_pattern(x: OutputData) -> dict | None:
    """Every off element lies at index >= k > 0 of one dim (or of the flattened index), and the tail
    from k on is off throughout: a grid or a mask that stops short."""
    candidates = []
    counts = x.dim_counts()
    for dim, n in enumerate(x.shape):
        if n < 2:
            continue
        hit = counts[dim] > 0
        k = int(torch.argmax(hit.view(torch.uint8)))
        m = x.numel // n
        coverage = x.count_off / ((n - k) * m)
        if k > 0 and _credible(coverage, k * m) and _evenly_off(counts[dim][k:] / m, coverage):
            candidates.append((coverage, dim, k, n))
    if sum(1 for s in x.shape if s > 1) >= 2:  # with one real dim, the flat tail is that dim's
        f = x.first_off
        coverage = x.count_off / (x.numel - f)
        if f > 0 and _credible(coverage, f) and _evenly_off(_chunk_density(x.bad[f:]), coverage):
            candidates.append((coverage, None, f, x.numel))
    if not candidates:
        return None
    coverage, dim, k, n = max(candidates, key=lambda item: item[0])  # ties: a real dim before the flat index
    grid_block = floor_block(n, k)
    block = pow2_factor(k)
    data = {"dim": dim, "start": k, "size": n, "count": n - k, "coverage": num(coverage),
            "grid_floor_block": grid_block, "start_multiple_of": block if block >= 8 else None}
    where = f"dim {dim} (size {n})" if dim is not None else f"the flattened index (size {n})"
    text = (f"errors confined to the tail of {where}: indices {k}..{n - 1} ({n - k} of them, "
            f"{coverage:.0%} off there), everything before index {k} is right")
    if dim is None:
        data["start_index"] = unravel(k, x.shape)
        text += f" (flat index {k} is element {data['start_index']})"
    if grid_block:
        text += (f"; {k} = ({n} // {grid_block}) * {grid_block}: what a grid of floor({n} / {grid_block}) "
                 f"programs covers, the last partial block is never computed")
    elif block >= 8:
        text += f"; {k} is a multiple of {block}"
    return pattern("tail", text, coverage, data)


def _fold(hist: torch.Tensor, period: int) -> torch.Tensor:
    """Counts per position modulo `period` (the last partial period left out)."""
    if hist.dtype == torch.bool:
        hist = hist.view(torch.uint8)
    usable = hist.numel() // period * period
    return hist[:usable].view(-1, period).sum(dim=0, dtype=torch.float64)


def _periodic_fit(hist: torch.Tensor, per_position: int) -> dict | None:
    """Off elements concentrated at some positions modulo len(hist), repeated over the periods."""
    period = hist.numel()
    total = float(hist.sum())
    if per_position < 4 or total < 4:
        return None
    hot = hist / per_position >= 0.5
    count = int(hot.sum())
    if not count or count > period // 2:
        return None
    inside = float(hist[hot].sum())
    density, confinement = inside / (count * per_position), inside / total
    if density < 0.6 or confinement < 0.9:
        return None
    return {"period": period, "positions": hot.nonzero().flatten().tolist(), "density": num(density),
            "confinement": num(confinement)}


def _describe_positions(positions: list[int], period: int) -> str:
    if period == 2:
        return f"every other index (the {'even' if positions == [0] else 'odd'} ones)"
    if len(positions) == 1:
        p = positions[0]
        edge = (" (the last element of each block)" if p == period - 1 else
                " (the first element of each block)" if p == 0 else "")
        return f"position {p} of every {period}{edge}"
    if positions == list(range(positions[0], positions[-1] + 1)):
        text = f"positions {positions[0]}..{positions[-1]} of every {period}"
        if len(positions) == period // 2 and positions[0] in (0, period // 2):
            text += f" (every other block of {period // 2})"
        return text
    return f"positions {ranges(positions)} of every {period}"


def periodic_pattern(x: OutputData) -> dict | None:
    """Off elements at fixed positions modulo a power of two (2..1024), repeated over at least four
    periods, along one dim or the flattened index."""
    last = x.shape[-1] if x.shape else 1
    real_dims = sum(1 for size in x.shape if size > 1)
    found = []
    if real_dims >= 2:  # along each dim, from its per-index counts
        for dim in sorted(range(len(x.shape)), key=lambda d: -d):  # the last dim first on ties
            n, hist = x.shape[dim], x.dim_counts()[dim]
            for shift in range(1, 11):
                period = 1 << shift
                if period * 4 > n:
                    break
                fit = _periodic_fit(_fold(hist, period), (n // period) * (x.numel // n))
                if fit:
                    found.append({**fit, "dim": dim})
                    break
    if x.numel >= 8:  # along the flattened index: blocks that do not line up with the rows
        top = 1 << min(10, int(math.log2(x.numel // 4)))
        base = _fold(x.bad, top)
        for shift in range(1, int(math.log2(top)) + 1):
            period = 1 << shift
            if real_dims >= 2 and (last % period == 0 or period % last == 0):
                continue
            fit = _periodic_fit(_fold(base, period) if period < top else base, (x.numel // top) * (top // period))
            if fit:
                found.append({**fit, "dim": None})
                break
    if not found:
        return None
    best = max(found, key=lambda f: f["density"] * f["confinement"])
    where = f"along dim {best['dim']}" if best["dim"] is not None else "along the flattened index"
    text = (f"errors concentrated at {_describe_positions(best['positions'], best['period'])} {where}: "
            f"{best['density']:.0%} of those positions are off and they hold {best['confinement']:.0%} of all "
            f"off elements")
    return pattern("periodic", text, best["density"] * best["confinement"], best)


def slices_pattern(x: OutputData, skip_dims: set[int]) -> dict | None:
    """The off elements lie in at most half the indices of one dim (rows, columns, channels), densely."""
    best = None
    for dim, n in enumerate(x.shape):
        m = x.numel // n if n else 0
        if n < 2 or m < 4 or dim in skip_dims or x.count_off < 4:
            continue
        hit = (x.dim_counts()[dim] > 0).nonzero().flatten()
        if hit.numel() > n // 2:  # "all but a few" says little about where to look
            continue
        density = x.count_off / (hit.numel() * m)
        if density >= 0.5 and (best is None or density > best[0]):
            best = (density, dim, n, hit.tolist())
    if best is None:
        return None
    density, dim, n, hit = best
    data = {"dim": dim, "size": n, "count": len(hit), "indices": hit[:16], "density": num(density)}
    text = (f"errors confined to {len(hit)} of the {n} indices of dim {dim}: {ranges(hit)} "
            f"({density:.0%} of the elements in those slices are off, all others are right)")
    return pattern("slices", text, density, data)


def tile_pattern(x: OutputData) -> dict | None:
    """The off elements densely fill a box restricted along two or more dims: one program's tile."""
    if x.count_off < 4 or len(x.shape) < 2:
        return None
    box = []
    for dim, counts in enumerate(x.dim_counts()):
        hit = (counts > 0).nonzero().flatten()
        box.append((int(hit[0]), int(hit[-1]) + 1))
    restricted = [d for d, (a, b) in enumerate(box) if b - a < x.shape[d]]
    volume = math.prod(b - a for a, b in box)
    if len(restricted) < 2 or volume < 4:
        return None
    density = x.count_off / volume
    if density < 0.5:
        return None
    data = {"box": [[a, b] for a, b in box], "volume": volume, "density": num(density),
            "restricted_dims": restricted,
            "starts_multiple_of": [pow2_factor(a) if a else None for a, _ in box]}
    slices = ", ".join(f"{a}:{b}" for a, b in box)
    text = (f"errors confined to the box [{slices}] of {list(x.shape)} ({volume} elements, {density:.0%} off): "
            "a tile of the output")
    at_end = [d for d in restricted if box[d][1] == x.shape[d] and box[d][0] > 0]
    if at_end == restricted:
        text += f", the last tile along dims {restricted}: the masks or the grid of those dims"
    return pattern("tile", text, density, data)
