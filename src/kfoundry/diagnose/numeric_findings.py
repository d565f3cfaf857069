"""Numeric evidence (kfoundry.diagnose.numeric) as DiagnosticFindings: what is wrong, the numbers,
and where to look next."""

from __future__ import annotations

from typing import Any

from kfoundry.types import DiagnosticFinding

CATEGORY = {"nonfinite": "nan", "reduced-precision": "precision", "reference-precision": "precision"}


def _g(value: Any, spec: str = ".3g") -> str:
    return "n/a" if value is None else format(value, spec)


def _title(kind: str, d: dict[str, Any]) -> str:
    if kind == "nonfinite":
        return f"{d['count']} NaN/Inf where the reference is finite, first at {d['first_index']}"
    if kind == "tail":
        where = f"dim {d['dim']}" if d["dim"] is not None else "the flattened index"
        return f"only the tail of {where} is wrong: the last {d['count']} of {d['size']} (from index {d['start']})"
    if kind == "slices":
        return f"only {d['count']} of {d['size']} indices of dim {d['dim']} are wrong: {d['indices'][:8]}"
    if kind == "periodic":
        where = f"dim {d['dim']}" if d["dim"] is not None else "the flattened index"
        return f"errors repeat with period {d['period']} along {where}, at positions {d['positions'][:8]}"
    if kind == "tile":
        return f"only the box {d['box']} is wrong"
    if kind == "transposed":
        return f"the output is the reference with dims {d['dims']} transposed" + ("" if d["square"] else " (in memory)")
    if kind == "scale":
        named = f" = {d['named']}" if d.get("named") else ""
        if d.get("pivot") is not None:
            return (f"candidate − {d['pivot']:.6g} ≈ {d['factor']:.6g}{named} × (reference − {d['pivot']:.6g}) "
                    f"({d['scope']})")
        return f"candidate ≈ {d['factor']:.6g}{named} × reference ({d['scope']})"
    if kind == "offset":
        return f"candidate ≈ reference + {d['offset']:.6g} ({d['scope']})"
    if kind == "offset-along-dim":
        return f"candidate − reference is a per-index vector along dim {d['dim']}: a missing or extra bias"
    if kind == "scale-along-dim":
        return f"candidate / reference is a per-index factor along dim {d['dim']}: a wrong per-row/channel scale"
    if kind == "untouched":
        return "the off elements hold NaN: never written"
    if kind == "zeros":
        return "the off elements hold exactly 0"
    if kind == "constant":
        return f"the off elements hold the constant {d['fill']}"
    if kind == "reduced-precision":
        return f"small uniform error at the level of {d.get('consistent_with', 'reduced precision')}"
    if kind == "reference-precision":
        return "the candidate is closer to the float64 truth than the reference"
    if kind == "everywhere":
        return f"{d['fraction']:.0%} of the elements are wrong, with no structure"
    if kind == "scattered":
        return f"scattered wrong elements ({_g(d['fraction'], '.2%')})"
    return kind


def _direction(kind: str, d: dict[str, Any]) -> str:
    if kind == "tail":
        where = f"dim {d['dim']}" if d["dim"] is not None else "the flattened output"
        return (f"the grid or the mask misses the last {d['count']} elements of {where}: use "
                "triton.cdiv(n, BLOCK) for the grid and mask every load and store with offs < n")
    if kind == "slices":
        return (f"only some indices of dim {d['dim']} are wrong: check how the program id maps to that dim "
                "(its offset and stride), and any branch or loop bound that treats those indices differently")
    if kind == "periodic":
        return (f"check block boundaries: the index math within a block of {d['period']} (offsets at the "
                "block's edges, a mask like offs < BLOCK - 1, a loop step that skips or repeats elements)")
    if kind == "tile":
        return ("one tile is wrong: check that program's row/column offsets (pid -> tile mapping) and the masks "
                "at the tile's edges")
    if kind == "transposed":
        return ("swap the output strides/indices: store with the output's own strides (out.stride(0), "
                "out.stride(1)) and its [row, column] order, not the input's or the transposed one's")
    if kind == "scale":
        named = f" (= {d['named']})" if d.get("named") else ""
        where = (f" on the part before the constant {d['pivot']:.6g} is added" if d.get("pivot") is not None
                 else "")
        return (f"check the scaling constant: a factor {d['factor']:.6g}{named} is missing or extra{where} (a "
                "softmax scale 1/sqrt(d), a mean's 1/n, alpha, exp vs exp2's log2(e), a term counted twice)")
    if kind == "offset":
        return (f"a constant {d['offset']:.6g} is missing or extra: the bias add, an eps, or the accumulator's "
                "initial value")
    if kind == "offset-along-dim":
        return (f"add (or stop adding twice) the per-index term broadcast along dim {d['dim']}, e.g. bias[c] for "
                f"channel c: compare v = {d['profile'][:4]} with the model's bias (a missing bias shows as -bias)")
    if kind == "scale-along-dim":
        return (f"each index of dim {d['dim']} has its own wrong factor s = {d['profile'][:4]}: check the "
                "normaliser it is divided or multiplied by (a row sum or max must cover every block of the row, "
                "with masked elements neutral: other=0 for sums, -inf for a max) or the per-channel weight")
    if kind == "nonfinite":
        return ("masked loads need `other=` (0 for sums, -inf for a max); check divisions (by zero, by an empty "
                "sum) and the running max of a softmax (subtract it before exp)")
    if kind == "untouched":
        return ("those elements were never stored: the grid must cover every output (triton.cdiv) and each "
                "store's mask must admit them")
    if kind == "zeros":
        return ("those elements hold 0: the grid or the store's mask skips them in a zero-initialised output, or "
                "a masked load's other=0 reaches the store")
    if kind == "constant":
        return "a constant is stored instead of the result: check the masked loads' other= and the accumulator init"
    if kind == "reduced-precision":
        return ('compute in fp32: tl.dot(a, b, input_precision="ieee") (fp32 tl.dot defaults to TF32), '
                "accumulate in tl.float32, and keep fp32 inputs fp32 (no casts to fp16/bf16)")
    if kind == "reference-precision":
        return "the kernel's precision is not the problem: the reference's own error is larger; look elsewhere"
    if kind == "everywhere":
        return ("the computation itself is wrong: check the formula against the reference step by step, the input "
                "indexing (strides, offsets, which pointer) and the reduction axis; try a tiny input by hand")
    if kind == "scattered":
        return ("isolated elements are off: look for a race (two programs writing one element), an accumulator "
                "not initialised in some programs, or values at the edge of the tolerance")
    return "compare the kernel's index math and masks with the reference"


def _stats_finding(pattern: dict[str, Any]) -> DiagnosticFinding:
    s, tol = pattern["stats"], pattern.get("tolerance") or {}
    shape = tuple(pattern.get("shape") or ())
    evidence = [
        (f"{s['count_off']} of {s['count']} elements ({_g(s['fraction_off'], '.2%')}) outside "
         f"atol={_g(tol.get('atol'), 'g')}, rtol={_g(tol.get('rtol'), 'g')}"),
        f"max abs error {_g(s['max_abs'])} at {s.get('max_abs_at')}, mean abs error {_g(s['mean_abs'])}",
    ]
    if s.get("max_rel") is not None:
        evidence.append(f"max rel error {_g(s['max_rel'])}, mean rel error {_g(s['mean_rel'])} (where |ref| > atol)")
    if s.get("first_off"):
        first = s["first_off"][0]
        evidence.append(f"first off at {first['index']}: {_g(first['candidate'], '.6g')} vs reference "
                        f"{_g(first['reference'], '.6g')}")
    if s.get("nonfinite_count"):
        evidence.append(f"{s['nonfinite_count']} NaN/Inf where the reference is finite")
    truth = s.get("truth")
    if truth:
        evidence.append(f"against the float64 truth: candidate max abs error {_g(truth['candidate_max_abs'])} "
                        f"(e={_g(truth['candidate_error_ratio'])}), reference {_g(truth['reference_max_abs'])} "
                        f"(e={_g(truth['reference_error_ratio'])})")
    if pattern.get("sampled"):
        evidence.append(pattern["sampled"]["note"])
    patterns = pattern.get("patterns") or []
    direction = (f"see the {patterns[0]['kind']} finding: {_direction(patterns[0]['kind'], patterns[0]['data'])}"
                 if patterns else "compare the kernel's index math and masks with the reference")
    return DiagnosticFinding(
        category="wrong-values", severity="error",
        title=(f"output {shape} {pattern.get('dtype', '')} is wrong: {_g(s['fraction_off'], '.2%')} of elements "
               f"off, max abs error {_g(s['max_abs'])}"),
        evidence=evidence, direction=direction,
        data={k: v for k, v in s.items() if k != "first_off"} | {"tolerance": tol})


def pattern_findings(pattern: dict[str, Any]) -> list[DiagnosticFinding]:
    """The findings of an error_pattern dict: wrong-values (the numbers) first, then a dtype mismatch
    or one finding per pattern; a shape mismatch alone (there are no numbers). Empty when nothing
    was off."""
    mismatch = pattern.get("mismatch")
    stats = pattern.get("stats")
    findings: list[DiagnosticFinding] = []
    if stats and (stats.get("count_off") or mismatch):  # none on a shape mismatch: nothing to compare
        findings.append(_stats_finding(pattern))
    if mismatch:
        if mismatch["kind"] == "shape":
            title = (f"output shape {tuple(mismatch['candidate_shape'])} but the reference's is "
                     f"{tuple(mismatch['reference_shape'])}")
        else:
            title = f"output dtype {mismatch['candidate_dtype']} but the reference's is {mismatch['reference_dtype']}"
        findings.append(DiagnosticFinding(
            category="shape", severity="error", title=title, evidence=list(mismatch.get("hints") or []),
            direction=mismatch["hint"], data=dict(mismatch)))
        return findings
    for item in pattern.get("patterns") or []:
        kind, data = item["kind"], item.get("data") or {}
        confidence = item.get("confidence", 1.0)
        severity = "info" if kind == "reference-precision" else "error" if confidence >= 0.6 else "warning"
        findings.append(DiagnosticFinding(
            category=CATEGORY.get(kind, "error-pattern"), severity=severity, title=_title(kind, data),
            evidence=[item["description"], f"confidence {confidence:.2f}"], direction=_direction(kind, data),
            data={"kind": kind, "confidence": confidence, **data}))
    return findings


def race_findings(repeat: dict[str, Any] | None) -> list[DiagnosticFinding]:
    """The finding of a nondeterminism dict: an error when the two runs differ beyond the tolerance
    (the evaluator's `tolerance`, atol = rtol, when it set one), else a warning."""
    if not repeat:
        return []
    tolerance = repeat.get("tolerance")
    scaled = repeat.get("max_scaled")
    if repeat.get("count") is None:  # the runs' shapes or dtypes differ
        within = False
    elif isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool):
        within = scaled is not None and scaled <= tolerance
    else:
        within = bool(repeat.get("within_tolerance_of_each_other"))
    if repeat.get("count") is None:
        title = (f"two runs on identical inputs returned different shapes/dtypes: {repeat.get('first_shape')} "
                 f"{repeat.get('first_dtype')} vs {repeat.get('second_shape')} {repeat.get('second_dtype')}")
        evidence = []
    else:
        title = (f"two runs on identical inputs differ in {repeat['count']} elements "
                 f"({_g(repeat.get('fraction'), '.2%')}), max abs difference {_g(repeat.get('max_abs'))}")
        first_values = repeat.get("first_values") or [None, None]
        evidence = [(f"first difference at {repeat.get('first_index')}: {_g(first_values[0], '.8g')} vs "
                     f"{_g(first_values[1], '.8g')}"),
                    (f"max relative difference {_g(repeat.get('max_rel'))} ({_g(repeat.get('max_ulps'), '.3g')} "
                     "epsilons of the dtype)")]
        if repeat.get("nonfinite"):
            evidence.append(f"{repeat['nonfinite']} elements are NaN/Inf in one run only")
        if repeat.get("rows") is not None:
            evidence.append(f"in {repeat['rows']} of {repeat['rows_total']} rows, first {repeat.get('first_rows')}")
    if within:
        direction = ("the runs differ only in rounding: a summation order that varies between runs (tl.atomic_add, "
                     "split-K); fine within the tolerance, but use one program per output or a fixed-order "
                     "reduction where bitwise reproducibility matters")
    else:
        direction = ("a race: programs write overlapping output elements (check the grid-to-index mapping and the "
                     "masks), a read-modify-write shared between programs needs tl.atomic_*, or a program reads what "
                     "another writes in the same launch (there is no barrier across programs: split the kernel)")
    return [DiagnosticFinding(category="race", severity="warning" if within else "error", title=title,
                              evidence=evidence, direction=direction, data=dict(repeat))]
