"""One problem's outcome in a bench (with its samples), and the labels that say how a bench's figures were
obtained."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Self

from kfoundry.bench.floor import Floor, floor_fields
from kfoundry.bench.metrics import compiled_from, pass_at_k

# statuses beyond the evaluator's verdicts (kfoundry.types.STATUSES)
NO_SOLUTION = "no_solution"  # --method solutions: no candidate file for the problem
NO_CORRECT = "no_correct"  # --method optimize: the search found no correct candidate
PROBLEM_ERROR = "problem_error"  # the reference itself failed: the problem cannot be judged
TOO_LARGE = "too_large"  # the problem needs more memory than the machine has (at its --set sizes)
ERROR = "error"  # the harness failed on this problem (the bench goes on)
# the machine failed (our imports, CUDA, GPU memory held by others): the bench stops, and --resume runs it again
ENVIRONMENT_ERROR = "environment_error"

LABEL_KEYS = ("device", "torch", "triton", "precision", "tolerance", "trials", "timing_trials", "statistic",
              "policy", "timing")
FIGURES = ("speedup_eager", "speedup_compile", "runtime_ms", "eager_ms", "compile_ms")
STATS_KEYS = ("median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms", "trials")


@dataclass(kw_only=True)
class CandidateResult:
    """One candidate's verdict and figures: a solution file's sample, or the candidate a problem reports."""

    status: str
    message: str = ""
    compiled: bool | None = None  # None in records written before the flag: derived from the status
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    runtime_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    # the candidate's timed trials and the eager baseline's (median_ms, q1_ms, q3_ms, min_ms, max_ms, trials)
    runtime_stats: dict[str, Any] | None = None
    eager_stats: dict[str, Any] | None = None
    # the guard's rules that only warned (permissive policy: PyTorch computed part of the result)
    policy_warnings: list[str] = field(default_factory=list)
    run_dir: str | None = None  # relative to the bench's output directory
    candidate: str | None = None  # the solution file evaluated (solutions method)
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if self.compiled is None:
            self.compiled = compiled_from(self.status)

    @property
    def correct(self) -> bool:
        return self.status == "ok"

    @property
    def calls_pytorch(self) -> bool:
        """Passed only because the policy is permissive: PyTorch computed part of its result."""
        return self.correct and bool(self.policy_warnings)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def read_evaluation(self, record: dict[str, Any]) -> None:
        """The verdict and figures of an Evaluation (its to_dict())."""
        timing = record.get("timing") or {}
        self.status, self.message = record["status"], record.get("message") or ""
        self.compiled = compiled_from(self.status, record.get("phase") or (record.get("error") or {}).get("phase"))
        for key in FIGURES:
            setattr(self, key, timing.get(key))
        self.runtime_stats = _stats(timing.get("candidate"))
        self.eager_stats = _stats((timing.get("baselines") or {}).get("eager"))
        rules = [w.get("rule") for w in (record.get("guard") or {}).get("warnings") or [] if isinstance(w, dict)]
        self.policy_warnings = list(dict.fromkeys(r for r in rules if r))

    def take_figures(self, other: CandidateResult) -> None:
        """Report `other` (a sample) as this candidate."""
        for f in dataclasses.fields(CandidateResult):
            if f.name != "duration_s":
                setattr(self, f.name, copy.deepcopy(getattr(other, f.name)))


@dataclass(kw_only=True)
class SampleResult(CandidateResult):
    """One of a problem's solution files (KernelBench's level_L_problem_N_sample_K_kernel.py)."""

    sample_id: int


@dataclass(kw_only=True)
class ProblemResult(CandidateResult):
    """A problem's outcome: its reported candidate (with several samples, the best of them) and how it ran."""

    name: str
    path: str
    number: int | None
    method: str
    fingerprint: str  # of the settings it ran with: --resume keeps it only when they are the same
    evaluations: int | None = None  # evaluations spent (optimize method)
    set_values: dict[str, Any] = field(default_factory=dict)  # the --set values that applied to it
    labels: dict[str, Any] = field(default_factory=dict)  # device, versions, tolerance, trials, policy, ...
    finished_at: float | None = None
    samples: list[SampleResult] = field(default_factory=list)  # solutions method: every sample file, by id
    best_sample: int | None = None  # the sample reported: the fastest correct one
    pass_at_k: dict[str, float] = field(default_factory=dict)  # "pass@1", "pass@n" over its samples
    # the reported candidate judged again at a second size set (kfoundry.types.SizeCheck as a dict)
    other_sizes: dict[str, Any] | None = None
    # evaluations of the composer's and the tuner's candidates that failed "out of resource" (optimize method)
    out_of_resource: int | None = None
    floor: Floor | None = None  # the problem's speed of light on the device (None on CPU, or without a cost)
    # optimize method: the run's generation-0 best speedup vs eager, and the final best's (speedup_eager) gain over it
    generation0_speedup: float | None = None
    gain_over_generation0: float | None = None

    @property
    def holds_at_other_sizes(self) -> bool | None:
        return None if not self.correct or not self.other_sizes else self.other_sizes.get("holds")

    def floor_record(self) -> dict[str, Any]:
        """kfoundry.bench.floor.FIELDS: the floor, and the fraction of it our time (where correct), eager's and
        torch.compile's reach."""
        return floor_fields(self.floor, self.runtime_ms if self.correct else None, self.eager_ms, self.compile_ms)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        del data["floor"]
        data.update(self.floor_record())
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProblemResult:
        result = super().from_dict(data)
        result.samples = [s if isinstance(s, SampleResult) else SampleResult.from_dict(s) for s in result.samples]
        result.floor = Floor.from_fields(data)
        return result

    def choose_best_sample(self) -> None:
        """Report the fastest correct sample (the first correct one where none was timed); with none
        correct, the first that compiled, else sample 0's failure. pass@k for k = 1 and k = n."""
        if not self.samples:
            return
        best = min(self.samples, key=_sample_rank)
        self.take_figures(best)
        self.best_sample = best.sample_id
        n, c = len(self.samples), sum(s.correct for s in self.samples)
        self.pass_at_k = {f"pass@{k}": pass_at_k(n, c, k) for k in sorted({1, n})}
        if n > 1:
            self.message = f"best of {n} samples: sample {best.sample_id} ({c} correct); {best.message}"


def _stats(stats: dict[str, Any] | None) -> dict[str, Any] | None:
    return {k: stats.get(k) for k in STATS_KEYS} if stats else None


def _sample_rank(sample: SampleResult) -> tuple:
    speedup = sample.speedup_eager if sample.correct and sample.speedup_eager is not None else 0.0
    return (not sample.correct, -speedup, not sample.compiled, sample.sample_id)


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
