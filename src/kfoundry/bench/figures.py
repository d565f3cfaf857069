"""A bench's metrics as labelled lines of text, for the terminal and the HTML page alike: each
says what it was computed over; a figure that needs GPU timing reads "n/a (no GPU timing)"."""

from __future__ import annotations

from typing import Any

from kfoundry.bench.metrics import BASELINES, FAST_P

NO_TIMING = "n/a (no GPU timing)"
BASELINE_NAMES = {"eager": "eager", "compile": "torch.compile"}


def _speedup(value: float | None, timed: bool) -> str:
    if value is None:
        return NO_TIMING if not timed else "n/a"
    return f"{value:.3f}x"


def _share(value: float | None, timed: bool) -> str:
    if value is None:
        return NO_TIMING if not timed else "n/a"
    return f"{value:.1%}"


def metric_rows(metrics: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) lines in reading order."""
    n, correct = metrics["problems"], metrics["correct"]
    rate = metrics["correctness_rate"]
    rows = [("correctness rate", "n/a (no problem)" if rate is None else f"{rate:.1%} ({correct} of {n} problems)")]
    for baseline in BASELINES:
        part = metrics[baseline]
        name = BASELINE_NAMES[baseline]
        timed = part["timed_correct"] > 0 or correct == 0
        for p in FAST_P:
            rows.append((f"fast_{p:g} vs {name} (correct and > {p:g}x faster, of all {n})",
                         _share(part["fast_p"][f"{p:g}"], timed)))
        over = f"the {part['timed_correct']} correct timed problem(s)" if part["timed_correct"] else "the correct problems"
        rows.append((f"geomean speedup vs {name}, over {over}",
                     _speedup(part["geomean_correct"], timed)))
        rows.append((f"geomean speedup vs {name}, over all {n} problems (a failed one counts as 1.0x)",
                     _speedup(part["geomean_all"], timed)))
        if part["untimed_correct"] and part["timed_correct"]:
            rows.append((f"correct problems without a {name} time (left out of the {name} figures)",
                         str(part["untimed_correct"])))
    if metrics["unjudged"]:
        rows.append(("of them, problems whose reference failed or did not fit (counted as failures)",
                     str(metrics["unjudged"])))
    return rows


def speedup_text(value: float | None, correct: bool) -> str:
    if value is None:
        return "-" if not correct else "n/a"
    return f"{value:.3g}x"


def ms_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
