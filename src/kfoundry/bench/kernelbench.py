"""A bench's results in the files KernelBench's own scripts write and read, beside bench.json:

- eval_results.json (scripts/eval_from_generations.py writes it, benchmark_eval_analysis.py reads it):
  {"<problem_id>": [{"sample_id", "compiled", "correctness", "metadata", "runtime", "runtime_stats"}]},
  one entry per sample (a problem without samples, e.g. the reference or optimize method, is sample 0).
  The problem_id is the leading number of the problem's file name, KernelBench's id; a problem without
  one (the examples layout), or sharing it with another, is keyed by its name.
- baseline_time_torch.json (scripts/generate_baseline_time.py): {"levelL": {"<file>.py": {"mean", ...}}},
  the eager reference's times, keyed by the problem's file name (its folder's name + .py in the examples
  layout); problems not timed (CPU) are left out. L is the suite's level (--level N, or a suite directory named levelN);
  "level_unknown" where neither says it, so the file never claims a level it cannot know.

KernelBench reports the mean of its timed trials; kfoundry reports its statistic (the median: bench.json's
labels say which). "runtime" and "mean" both hold that statistic, so that KernelBench's analysis, which
divides baseline "mean" by "runtime", gives kfoundry's own speedups; "statistic" names it, "median",
"q1" and "q3" are given, and "std" is null (kfoundry does not record it). Untimed (CPU) samples have
runtime -1.0 and runtime_stats {}, as KernelBench writes for samples it did not time."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kfoundry.bench.outputs import write_atomic
from kfoundry.bench.results import CandidateResult, ProblemResult

EVAL_RESULTS = "eval_results.json"
BASELINE_TIMES = "baseline_time_torch.json"
UNKNOWN_LEVEL = "level_unknown"
NOT_TIMED = -1.0
# kfoundry's verdict -> the metadata key KernelBench files that kind of failure under
METADATA_KEYS = {"compile_error": "compilation_error", "runtime_error": "runtime_error", "crash": "runtime_error",
                 "timeout": "runtime_error", "wrong_output": "correctness_issue", "cheating": "cheating"}
MESSAGE_CHARS = 2000


def level_key(level: int | None) -> str:
    return UNKNOWN_LEVEL if level is None else f"level{level}"


def _stats(ms: float, stats: dict[str, Any] | None, labels: dict[str, Any]) -> dict[str, Any]:
    stats = stats or {}
    return {"mean": ms, "std": None, "min": stats.get("min_ms"), "max": stats.get("max_ms"),
            "num_trials": stats.get("trials") or labels.get("timing_trials"), "median": stats.get("median_ms"),
            "q1": stats.get("q1_ms"), "q3": stats.get("q3_ms"), "statistic": labels.get("statistic") or "median",
            "hardware": labels.get("device")}


def _entry(problem: ProblemResult, sample: CandidateResult, sample_id: int) -> dict[str, Any]:
    labels = problem.labels
    timed = sample.correct and sample.runtime_ms is not None
    metadata: dict[str, Any] = {"status": sample.status, "hardware": labels.get("device"),
                                "problem": problem.name, "candidate": sample.candidate}
    if sample.status in METADATA_KEYS:
        metadata[METADATA_KEYS[sample.status]] = sample.message[:MESSAGE_CHARS]
    elif not sample.correct:
        metadata["error"] = sample.message[:MESSAGE_CHARS]
    if sample.policy_warnings:
        metadata["policy_warnings"] = list(sample.policy_warnings)
    return {"sample_id": sample_id, "compiled": bool(sample.compiled), "correctness": sample.correct,
            "metadata": metadata, "runtime": sample.runtime_ms if timed else NOT_TIMED,
            "runtime_stats": _stats(sample.runtime_ms, sample.runtime_stats, labels) if timed else {}}


def _problem_ids(results: Sequence[ProblemResult]) -> dict[str, str]:
    shared = Counter(r.number for r in results)
    return {r.name: str(r.number) if r.number is not None and shared[r.number] == 1 else r.name for r in results}


def _in_order(results: Sequence[ProblemResult]) -> list[ProblemResult]:
    return sorted(results, key=lambda r: (r.number is None, r.number or 0, r.name))


def eval_results(results: Sequence[ProblemResult]) -> dict[str, list[dict[str, Any]]]:
    """KernelBench's eval_results.json, ordered by problem id."""
    ids = _problem_ids(results)
    document: dict[str, list[dict[str, Any]]] = {}
    for problem in _in_order(results):
        samples: list[tuple[int, CandidateResult]] = [(s.sample_id, s) for s in problem.samples] or [(0, problem)]
        document[ids[problem.name]] = [_entry(problem, sample, k) for k, sample in samples]
    return document


def baseline_times(results: Sequence[ProblemResult], level: int | None) -> dict[str, dict[str, Any]]:
    """KernelBench's baseline file: the eager times of the problems that have one."""
    times = {}
    for problem in _in_order(results):
        # the baseline is the problem's: any sample's evaluation may have timed it
        timed = next((c for c in (problem, *problem.samples) if c.eager_ms is not None), None)
        if timed is not None:
            times[f"{problem.name}.py"] = _stats(timed.eager_ms, timed.eager_stats, problem.labels)
    return {level_key(level): times}


def write(out: Path, results: Sequence[ProblemResult], level: int | None) -> list[Path]:
    paths = []
    for name, document in ((EVAL_RESULTS, eval_results(results)), (BASELINE_TIMES, baseline_times(results, level))):
        path = out / name
        write_atomic(path, json.dumps(document, indent=2, allow_nan=False, default=str) + "\n")
        paths.append(path)
    return paths

