"""The suite metrics papers use, as pure functions of per-problem outcomes.

An outcome is a mapping with `status` ("ok" is correct) and the speedups `speedup_eager` /
`speedup_compile` (None when not measured). Every problem counts: one whose reference could not be
loaded or run, or that did not fit the machine (UNJUDGED), is a failure like any other (a suite's
score must not rise because its problems fail to load), and the summary says how many there were.

- correctness rate: correct / problems.
- fast_p: the share of problems that are correct *and* more than p times faster than the
  baseline; a failed problem is never fast.
- geometric-mean speedup over the correct problems, and over all problems with each failed one
  counted as the reference (1.0x).

A figure that needs speedups is None when no correct problem has one (no GPU timing): never 0."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

FAST_P = (0.0, 1.0, 1.2, 1.5, 2.0)
BASELINES = {"eager": "speedup_eager", "compile": "speedup_compile"}
UNJUDGED = ("problem_error", "too_large")  # the reference failed or did not fit: counted as failures, and apart

Outcome = Mapping[str, Any]


def is_correct(outcome: Outcome) -> bool:
    return outcome.get("status") == "ok"


def correctness_rate(outcomes: Sequence[Outcome]) -> float | None:
    if not outcomes:
        return None
    return sum(is_correct(o) for o in outcomes) / len(outcomes)


def _timed(outcomes: Sequence[Outcome], key: str) -> tuple[list[float], int]:
    """Speedups of the correct problems that have one, and how many correct ones lack it."""
    values, missing = [], 0
    for outcome in outcomes:
        if is_correct(outcome):
            value = outcome.get(key)
            if isinstance(value, (int, float)) and value > 0 and math.isfinite(value):
                values.append(float(value))
            else:
                missing += 1
    return values, missing


def fast_p(outcomes: Sequence[Outcome], p: float, key: str = "speedup_eager") -> float | None:
    """Share of all problems that are correct and more than p times faster; None when speedups are
    needed and none was measured. A correct problem without a speedup is not counted fast."""
    if not outcomes:
        return None
    values, missing = _timed(outcomes, key)
    if not values and missing:
        return None
    return sum(v > p for v in values) / len(outcomes)


def geomean(values: Iterable[float]) -> float | None:
    values = list(values)
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def geomean_correct(outcomes: Sequence[Outcome], key: str = "speedup_eager") -> float | None:
    """Geometric mean of the speedups of the correct problems (None: none correct, or not timed)."""
    values, _ = _timed(outcomes, key)
    return geomean(values)


def geomean_all(outcomes: Sequence[Outcome], key: str = "speedup_eager") -> float | None:
    """Geometric mean over all problems, a failed problem counted as the reference (1.0x).
    None when correct problems exist but none was timed; 1.0 when every problem failed."""
    if not outcomes:
        return None
    values, missing = _timed(outcomes, key)
    if missing and not values:
        return None
    failed = sum(not is_correct(o) for o in outcomes)
    return geomean(values + [1.0] * failed)


def summarize(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Every metric, with the counts that say what each was computed over."""
    outcomes = list(outcomes)
    correct = sum(is_correct(o) for o in outcomes)
    summary: dict[str, Any] = {
        "problems": len(outcomes),
        "unjudged": sum(o.get("status") in UNJUDGED for o in outcomes),
        "correct": correct,
        "correctness_rate": correctness_rate(outcomes),
    }
    for baseline, key in BASELINES.items():
        values, missing = _timed(outcomes, key)
        summary[baseline] = {
            "timed_correct": len(values),
            "untimed_correct": missing,
            "fast_p": {f"{p:g}": fast_p(outcomes, p, key) for p in FAST_P},
            "geomean_correct": geomean_correct(outcomes, key),
            "geomean_all": geomean_all(outcomes, key),
        }
    return summary
