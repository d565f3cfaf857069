"""One problem's outcome in a bench, and the labels that say how a bench's figures were obtained."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# statuses beyond the evaluator's verdicts (kfoundry.types.STATUSES)
NO_SOLUTION = "no_solution"  # --method solutions: no candidate file for the problem
NO_CORRECT = "no_correct"  # --method optimize: the search found no correct candidate
PROBLEM_ERROR = "problem_error"  # the reference itself failed: the problem cannot be judged
TOO_LARGE = "too_large"  # the problem needs more memory than the machine has (at its --set sizes)
ERROR = "error"  # the harness failed on this problem (the bench goes on)

LABEL_KEYS = ("device", "torch", "triton", "precision", "tolerance", "trials", "timing_trials", "statistic",
              "policy", "timing")


@dataclass
class ProblemResult:
    name: str
    path: str
    number: int | None
    status: str
    message: str
    method: str
    fingerprint: str  # of the settings it ran with: --resume keeps it only when they are the same
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    runtime_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    run_dir: str | None = None  # relative to the bench's output directory
    candidate: str | None = None  # the solution file evaluated (solutions method)
    evaluations: int | None = None  # evaluations spent (optimize method)
    set_values: dict[str, Any] = field(default_factory=dict)  # the --set values that applied to it
    labels: dict[str, Any] = field(default_factory=dict)  # device, versions, tolerance, trials, policy, ...
    duration_s: float | None = None
    finished_at: float | None = None

    @property
    def correct(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProblemResult:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def labels_from_evaluation(evaluation: dict[str, Any]) -> dict[str, Any]:
    """How an Evaluation's figures were obtained (its to_dict())."""
    timing = evaluation.get("timing") or {}
    correctness = evaluation.get("correctness") or {}
    settings = evaluation.get("settings") or {}
    facts = evaluation.get("device_facts") or {}
    timed = timing.get("runtime_ms") is not None
    return {
        "device": timing.get("device") or facts.get("name") or evaluation.get("device"),
        "torch": timing.get("torch_version") or settings.get("torch"),
        "triton": timing.get("triton_version") or settings.get("triton"),
        "precision": correctness.get("precision") or settings.get("precision"),
        "tolerance": correctness.get("tolerance") or settings.get("tolerance"),
        "trials": settings.get("trials") or correctness.get("trials"),
        "timing_trials": timing.get("trials") if timed else None,
        "statistic": timing.get("statistic") if timed else None,
        "policy": settings.get("policy"),
        "timing": timing.get("method") if timed else f"not measured ({timing.get('reason') or 'no timing'})",
    }


def labels_from_run_result(result: dict[str, Any]) -> dict[str, Any]:
    """How an optimize run's figures were obtained (its result.json record)."""
    best = result.get("best") or {}
    timing, correctness = best.get("timing") or {}, best.get("correctness") or {}
    settings, versions, device = result.get("settings") or {}, result.get("versions") or {}, result.get("device") or {}
    timed = best.get("runtime_ms") is not None
    return {
        "device": timing.get("device") or device.get("name") or device.get("kind"),
        "torch": versions.get("torch"),
        "triton": versions.get("triton"),
        "precision": correctness.get("precision") or settings.get("precision"),
        "tolerance": correctness.get("tolerance") or settings.get("tolerance"),
        "trials": correctness.get("trials") or settings.get("trials"),
        "timing_trials": timing.get("trials") if timed else None,
        "statistic": timing.get("statistic") if timed else None,
        "policy": settings.get("policy"),
        "timing": timing.get("method") if timed else "not measured (no timed correct candidate)",
    }


def merge_labels(results: list[ProblemResult], options_labels: dict[str, Any]) -> dict[str, str]:
    """One label per key over all problems: the value, or the distinct values joined when they
    differ; the bench's own settings fill what no problem recorded."""
    merged: dict[str, str] = {}
    for key in LABEL_KEYS:
        values: list[str] = []
        for result in results:
            value = result.labels.get(key)
            if value is not None and str(value) not in values:
                values.append(str(value))
        if not values and options_labels.get(key) is not None:
            values = [str(options_labels[key])]
        merged[key] = " | ".join(values) if values else "-"
    return merged


def timed(results: list[ProblemResult]) -> bool:
    """Whether any correct problem has a measured speedup."""
    return any(r.correct and r.speedup_eager is not None for r in results)
