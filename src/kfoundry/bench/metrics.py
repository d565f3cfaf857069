"""The suite metrics papers use, as pure functions of per-problem outcomes.

An outcome is a mapping with `status` ("ok" is correct) and the speedups `speedup_eager` /
`speedup_compile` (None when not measured). Every problem counts: one whose reference could not be
loaded or run, or that did not fit the machine (UNJUDGED), is a failure like any other (a suite's
score must not rise because its problems fail to load), and the summary says how many there were.

- correctness rate: correct / problems; compile rate: problems whose candidate compiled and loaded
  (KernelBench's `compiled`) / problems.
- fast_p: the share of problems that are correct *and* more than p times faster than the
  baseline; a failed problem is never fast.
- geometric-mean speedup over the correct problems, and over all problems with each failed one
  counted as the reference (1.0x).
- passed calling PyTorch compute: correct problems whose candidate passed only because the policy is
  permissive (the guard's warnings).
- out of resource: evaluations of our own experts' candidates (the composer's, the tuner's) that failed to
  compile for want of shared memory, registers or threads ("out of resource"), per problem (--method optimize)
  and in total; the target is 0 (kfoundry.experts.composer.templates.device_limits).
- the floor (kfoundry.bench.floor: each problem's speed of light on the device): the geomean of the fraction of it
  ours, eager and torch.compile reach (floor / median time), each over the problems that have that fraction.
- samples (solutions with KernelBench's sample_K files): pass@k averaged over the problems (a problem
  without a file counts 0), and sample 0's own figures (KernelBench's analysis reads sample 0 only),
  while each problem's figures above are of its best sample (best of k).

A figure that needs speedups is None when no correct problem has one (no GPU timing): never 0."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kfoundry.bench.floor import FRACTION_FIELDS

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.2, 1.5, 2.0)  # KernelBench's analysis: 0, 0.5, 0.8, 1, 1.5, 2
BASELINES = {"eager": "speedup_eager", "compile": "speedup_compile"}
UNJUDGED = ("problem_error", "too_large")  # the reference failed or did not fit: counted as failures, and apart

Outcome = Mapping[str, Any]

# statuses whose candidate did not compile and load: a compile error (in any phase), and the bench's own
# statuses (kfoundry.bench.results) where no candidate loaded: missing file, reference failed, harness fault
NOT_COMPILED = ("compile_error", "no_solution", "problem_error", "too_large", "error", "no_correct",
                "environment_error")


def compiled_from(status: str, phase: str | None = None) -> bool:
    """KernelBench's `compiled`: the candidate compiled and loaded. An evaluation's failure while loading
    (phase "load", e.g. an error at import) did not; a candidate that loaded and then failed did."""
    if status == "ok":
        return True
    return status not in NOT_COMPILED and phase != "load"


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), for n samples of
    which c are correct."""
    if not 0 < k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n = {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


OUR_EXPERTS = ("composer", "tuner")  # the programmatic experts, whose kernels are checked against the device


def is_out_of_resource(status: str | None, message: str | None) -> bool:
    """A compile error for want of the GPU's shared memory, registers or threads (Triton's OutOfResources)."""
    return status == "compile_error" and "out of resource" in (message or "").lower()


def out_of_resource_total(outcomes: Sequence[Outcome]) -> int | None:
    """The problems' out-of-resource counts summed; None when no problem has one (no search ran)."""
    counts = [o.get("out_of_resource") for o in outcomes if o.get("out_of_resource") is not None]
    return sum(counts) if counts else None


def is_correct(outcome: Outcome) -> bool:
    return outcome.get("status") == "ok"


def is_compiled(outcome: Outcome) -> bool:
    compiled = outcome.get("compiled")
    if compiled is None:  # a record written before the flag
        return compiled_from(str(outcome.get("status")))
    return bool(compiled)


def calls_pytorch(outcome: Outcome) -> bool:
    return is_correct(outcome) and bool(outcome.get("policy_warnings"))


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


def _speed(outcomes: Sequence[Outcome], key: str) -> dict[str, Any]:
    values, missing = _timed(outcomes, key)
    return {
        "timed_correct": len(values),
        "untimed_correct": missing,
        "fast_p": {f"{p:g}": fast_p(outcomes, p, key) for p in FAST_P},
        "geomean_correct": geomean_correct(outcomes, key),
        "geomean_all": geomean_all(outcomes, key),
    }


def floor_metrics(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The problems with a floor, whose ceilings set them, and per fraction of the floor (ours_of_floor,
    eager_of_floor, compile_of_floor) its geomean over the problems that have it, with their count."""
    summary: dict[str, Any] = {
        "problems": sum(o.get("floor_ms") is not None for o in outcomes),
        "sources": sorted({str(o["floor_source"]) for o in outcomes if o.get("floor_source")}),
    }
    for key in FRACTION_FIELDS:
        values = [float(v) for o in outcomes if isinstance(v := o.get(key), (int, float)) and v > 0
                  and math.isfinite(v)]
        summary[key] = {"geomean": geomean(values), "problems": len(values)}
    return summary


def sample_metrics(outcomes: Sequence[Outcome]) -> dict[str, Any] | None:
    """pass@k over the problems' samples, and sample 0's figures; None when no problem has samples."""
    if not any(o.get("samples") for o in outcomes):
        return None
    counts = [(len(o.get("samples") or []), sum(is_correct(s) for s in o.get("samples") or [])) for o in outcomes]
    most = max(n for n, _ in counts)
    # per problem k is capped at its own n, as KernelBench's scripts do; a problem with no file counts 0
    averages = {f"{k}": sum(pass_at_k(n, c, min(k, n)) if n else 0.0 for n, c in counts) / len(counts)
                for k in sorted({1, most})}
    first = [next((s for s in o.get("samples") or [] if s.get("sample_id") == 0), o) if o.get("samples")
             else o for o in outcomes]
    return {
        "samples": sum(n for n, _ in counts),
        "correct_samples": sum(c for _, c in counts),
        "most_per_problem": most,
        "pass_at_k": averages,
        "sample_0": {"correct": sum(is_correct(o) for o in first), "compiled": sum(is_compiled(o) for o in first),
                     "eager": _speed(first, "speedup_eager")},
    }


def summarize(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Every metric, with the counts that say what each was computed over."""
    outcomes = list(outcomes)
    correct = sum(is_correct(o) for o in outcomes)
    compiled = sum(is_compiled(o) for o in outcomes)
    summary: dict[str, Any] = {
        "problems": len(outcomes),
        "unjudged": sum(o.get("status") in UNJUDGED for o in outcomes),
        "correct": correct,
        "correctness_rate": correctness_rate(outcomes),
        "compiled": compiled,
        "compile_rate": compiled / len(outcomes) if outcomes else None,
        "passed_calling_pytorch": sum(calls_pytorch(o) for o in outcomes),
        # the correct problems whose candidate was judged at a second size set, and those it held at
        "size_checked": sum(is_correct(o) and (o.get("other_sizes") or {}).get("holds") is not None
                            for o in outcomes),
        "holds_at_other_sizes": sum(is_correct(o) and (o.get("other_sizes") or {}).get("holds") is True
                                    for o in outcomes),
        "out_of_resource": out_of_resource_total(outcomes),
        "floor": floor_metrics(outcomes),
    }
    for baseline, key in BASELINES.items():
        summary[baseline] = _speed(outcomes, key)
    samples = sample_metrics(outcomes)
    if samples is not None:
        summary["samples"] = samples
    return summary
