"""A bench's metrics as labelled lines of text, for the terminal and the HTML page alike: each
says what it was computed over; a figure that needs GPU timing reads "n/a (no GPU timing)"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kfoundry.bench.floor import FRACTION_FIELDS, Floor
from kfoundry.bench.metrics import BASELINES, FAST_P

if TYPE_CHECKING:
    from kfoundry.bench.results import ProblemResult

NO_TIMING = "n/a (no GPU timing)"
RECIPE = "to compare with published numbers, use --policy permissive --tolerance 1e-2"
BASELINE_NAMES = {"eager": "eager", "compile": "torch.compile"}
FLOOR_NAMES = dict(zip(FRACTION_FIELDS, ("ours", "eager", "torch.compile"), strict=True))
FLOOR_MEANING = ("floor: the speed of light, the larger of bytes / bandwidth and FLOPs / the fastest compute roof "
                 "that honours the precision; of floor: floor / median time (100% = at the speed of light)")


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
    if metrics.get("compile_rate") is not None:
        rows.append(("compile rate (the candidate compiled and loaded)",
                     f"{metrics['compile_rate']:.1%} ({metrics['compiled']} of {n} problems)"))
    if "passed_calling_pytorch" in metrics:
        rows.append(("passed calling PyTorch compute (allowed only by --policy permissive, with a warning)",
                     f"{metrics['passed_calling_pytorch']} of {correct} passed"))
    if metrics.get("out_of_resource") is not None:
        rows.append(("out of resource (our experts' candidates over the GPU's shared memory, registers or threads; "
                     "target 0)", f"{metrics['out_of_resource']} evaluation(s)"))
    if metrics.get("size_checked"):
        rows.append(("holds at other sizes (the correct candidate judged again at a second size set)",
                     f"{metrics['holds_at_other_sizes']} of {metrics['size_checked']} checked"))
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
    rows += _floor_rows(metrics.get("floor"))
    rows += _sample_rows(metrics.get("samples"), n)
    if metrics["unjudged"]:
        rows.append(("of them, problems whose reference failed or did not fit (counted as failures)",
                     str(metrics["unjudged"])))
    return rows


def _floor_rows(floor: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The geomean fractions of the floor; nothing where no problem has a floor (a CPU run)."""
    if not floor or not floor["problems"]:
        return []
    rows = [("floor (speed of light): max(bytes / bandwidth, FLOPs / the fastest compute roof the precision allows)",
             f"{floor['problems']} problem(s), at {' and '.join(floor['sources'])} ceilings")]
    for key, name in FLOOR_NAMES.items():
        part = floor[key]
        rows.append((f"{name} of the floor (floor / median time), geomean over the {part['problems']} problem(s) "
                     "with one", _share(part["geomean"], True)))
    return rows


def _sample_rows(samples: dict[str, Any] | None, n: int) -> list[tuple[str, str]]:
    if not samples:
        return []
    rows = [("samples judged (each problem's figures above are its best sample: best of k)",
             f"{samples['samples']} ({samples['correct_samples']} correct), up to {samples['most_per_problem']} "
             "per problem")]
    for k, value in samples["pass_at_k"].items():
        rows.append((f"pass@{k} (unbiased estimate, averaged over all {n} problems)", f"{value:.1%}"))
    first = samples["sample_0"]
    rows.append(("sample 0 alone (as KernelBench's analysis reads): correct", f"{first['correct']} of {n}"))
    rows.append(("sample 0 alone: compiled", f"{first['compiled']} of {n}"))
    timed = first["eager"]["timed_correct"] > 0 or first["correct"] == 0
    rows.append(("sample 0 alone: fast_1 vs eager", _share(first["eager"]["fast_p"]["1"], timed)))
    return rows


def speedup_text(value: float | None, correct: bool) -> str:
    if value is None:
        return "-" if not correct else "n/a"
    return f"{value:.3g}x"


def samples_ok(result: ProblemResult) -> str:
    """How many of a problem's samples are correct: "2/3"."""
    return f"{sum(s.correct for s in result.samples)}/{len(result.samples)}" if result.samples else "-"


def gain_text(value: float | None) -> str:
    """A speedup or a gain with no verdict to qualify it: '1.5x', '-' for none."""
    return "-" if value is None else f"{value:.3g}x"


def credit_text(result: ProblemResult) -> str:
    """The generation-0 best, the final best and the gain over it: '1.2x -> 1.8x (1.5x)'; '-' without them."""
    if result.generation0_speedup is None or result.speedup_eager is None:
        return "-"
    return (f"{gain_text(result.generation0_speedup)} -> {gain_text(result.speedup_eager)}"
            f" ({gain_text(result.gain_over_generation0)})")


def ms_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def share_text(value: float | None) -> str:
    """A fraction as a percentage, two significant digits below 10%; '-' for none."""
    if value is None:
        return "-"
    return f"{value:.0%}" if value >= 0.1 else f"{value * 100:.2g}%"


def floor_text(record: Mapping[str, Any]) -> str:
    """A record's floor (kfoundry.bench.floor.FIELDS) in ms and the roof that sets it: '0.4113 3xTF32'."""
    floor = Floor.from_fields(record)
    return "-" if floor is None else f"{floor.ms:.4g} {floor.roof}"


def of_floor_text(record: Mapping[str, Any]) -> str:
    """The fractions of a record's floor ours, eager and torch.compile reach: '45%/12%/20%' ('-' for one not
    timed); '-' without a floor."""
    if Floor.from_fields(record) is None:
        return "-"
    return "/".join(share_text(record.get(key)) for key in FRACTION_FIELDS)
