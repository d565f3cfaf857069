"""What a prompt is rendered from: the problem, the parents with their verdicts and diagnoses, the
device, the rules' settings, retrieved experience and the reasons earlier tries failed."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from kfoundry.diagnose.render import render_markdown
from kfoundry.experts.strategies import Strategy
from kfoundry.input_facts import ProblemFacts
from kfoundry.problem import DEFAULT_TOLERANCE
from kfoundry.types import DeviceFacts, Evaluation


@dataclass
class ParentInfo:
    """One candidate an expert starts from: its source, how it was judged and why."""

    source: str
    path: str = ""
    status: str = "unknown"
    message: str = ""
    runtime_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    max_abs_error: float | None = None
    diagnosis_markdown: str = ""
    max_rel_error: float | None = None
    mismatch_fraction: float | None = None
    checked: str = ""  # where its verdict holds: the sizes it was judged at, and how its precision was checked
    derived_for: str = ""  # untimed: the target its kernels were compiled for on the CPU ("sm_90"; the diagnosis)

    @classmethod
    def from_evaluation(cls, source: str, evaluation: Evaluation, path: str | None = None) -> ParentInfo:
        timing, correctness = evaluation.timing, evaluation.correctness
        markdown = render_markdown(evaluation.diagnosis) if evaluation.diagnosis is not None else ""
        return cls(source=source, path=path if path is not None else evaluation.candidate, status=evaluation.status,
                   message=evaluation.message, runtime_ms=timing.runtime_ms,
                   speedup_eager=timing.speedup_eager, speedup_compile=timing.speedup_compile,
                   max_abs_error=correctness.max_abs_error, diagnosis_markdown=markdown,
                   max_rel_error=correctness.max_rel_error, mismatch_fraction=correctness.mismatch_fraction,
                   checked=checked_text(evaluation),
                   derived_for=next((row["derived_for"] for row in evaluation.profile.get("triton") or []
                                     if row.get("derived_for")), ""))


def checked_text(evaluation: Evaluation) -> str:
    """What a parent's verdict covers, said plainly: where it was given (a GPU, by name, or the CPU) and at
    which sizes (the file's own only when they were), at other sizes where the generalisation check ran, how
    its `tl.dot` precision was checked (run by the GPU, or emulated on the CPU: see
    kfoundry.evaluate.worker.emulated_precision) and whether its speed was measured. Only what the evaluation
    records is said: without a precision record or a device, nothing on where or how."""
    where = _checked_on(evaluation)
    verb = "verified" if evaluation.status == "ok" else "judged"
    overrides = evaluation.settings.get("set") or {}
    if overrides:
        sizes = ", ".join(f"{name} = {value!r}" for name, value in overrides.items())
        at = f"at this run's sizes ({sizes}), not at the problem file's own sizes"
    else:
        at = "at the problem file's own sizes"
    parts = [f"{verb} {where} {at}" if where else f"{verb} {at}"]
    if evaluation.other_sizes is not None:
        parts.append(evaluation.other_sizes.summary())
    parts += _dot_precision(evaluation.precision or {})
    if where:
        measured = evaluation.timing.runtime_ms is not None
        parts.append("speed measured there" if measured else "speed not measured")
    return "; ".join(parts)


# tl.dot's input_precision values whose fp32 products the CPU rounds to TF32 (kfoundry.evaluate.worker.emulated_precision)
_TF32 = ("tf32", "tf32x3")


def _checked_on(evaluation: Evaluation) -> str:
    """'on the CPU', 'on NVIDIA H200' (the GPU's name where recorded, else 'on a GPU'), or '' (unknown)."""
    checked = (evaluation.precision or {}).get("checked")
    device = evaluation.device or ""
    if checked == "cpu" or (checked is None and device == "cpu"):
        return "on the CPU"
    if checked != "gpu" and not device.startswith("cuda"):
        return ""
    facts = evaluation.device_facts
    name = facts.name if facts is not None and facts.kind == "cuda" and facts.name else evaluation.timing.device
    return f"on {name}" if name else "on a GPU"


def _dot_precision(record: dict[str, Any]) -> list[str]:
    """What the verdict says of the candidate's tl.dot precision (its TF32 paths), from the precision record
    (kfoundry.evaluate.parent.precision_check.precision_record)."""
    if record.get("checked") == "gpu":
        return ["tl.dot runs on that GPU itself, TF32 included: nothing emulated"]
    if record.get("checked") != "cpu":
        return []
    parts = ["on the CPU tl.dot's input_precision is emulated as a GPU's tensor cores compute it (TF32 rounding "
             "applied to fp32 operands at tf32 and tf32x3)"]
    dots = record.get("dots")
    if dots is not None:  # counted where the worker finished its runs
        emulated = [name for name in dots.get("emulated") or {} if name in _TF32]
        exact = list(dots.get("exact") or {})
        if emulated:
            parts.append(f"its fp32 tl.dot ran at {' and '.join(emulated)}, with that rounding applied")
        elif exact:
            parts.append(f"its fp32 tl.dot ran at {' and '.join(exact)} only, so there was no TF32 rounding to "
                         "apply")
        else:
            parts.append("it ran no fp32 tl.dot, so there was no TF32 rounding to apply")
    parts += record.get("not_modelled") or []
    return parts


@dataclass
class PromptContext:
    """Everything the templates may show. `experience` items are dicts with `title` and `text`, and
    optionally `source` (where the item comes from) and `code` (a kernel, shown in a fence)."""

    problem_source: str
    problem_name: str
    backend: str = "triton"
    parents: list[ParentInfo] = field(default_factory=list)
    device: DeviceFacts | None = None
    precision: str = "fp32"
    tolerance: float | None = None  # None: the precision's default, as the evaluator uses
    policy: str = "strict"
    experience: list[dict[str, Any]] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)
    problem_class: str = "other"  # kfoundry.problem_signature.problem_class: picks advice and strategies
    facts: ProblemFacts | None = None  # the shapes under test and what the inputs had in common
    timed: bool = False  # this run measures speed (on a GPU), at the shapes under test
    trials: int = 5  # correctness trials, each with its own draw of the inputs
    strategy: Strategy | None = None  # a first kernel's: this island's own plan
    other_strategies: list[Strategy] = field(default_factory=list)  # what the other islands were asked
    roofline: Any = None  # kfoundry.experts.roofline_text.RooflineEstimate at the file's own sizes, or None
    attempt: str = ""  # which request this is: a fresh sample (which one) or a retry (after what)
    # a baseline's median in ms if measured by now (never waits), where the run times at the file's own sizes
    baseline_ms: Callable[[str], float | None] | None = None

    def roofline_now(self) -> Any:
        """The roofline estimate with the eager and torch.compile times measured by the time a prompt is written
        (the baselines are timed beside the search, so a later prompt may know what an earlier one did not)."""
        if self.roofline is None or self.baseline_ms is None:
            return self.roofline
        return replace(self.roofline, eager_ms=self.baseline_ms("eager"), compile_ms=self.baseline_ms("compile"))

    @property
    def effective_tolerance(self) -> float:
        if self.tolerance is not None:
            return self.tolerance
        return DEFAULT_TOLERANCE.get(self.precision, DEFAULT_TOLERANCE["fp32"])
