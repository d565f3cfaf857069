"""What a prompt is rendered from: the problem, the parents with their verdicts and diagnoses, the
device, the rules' settings, retrieved experience and the reasons earlier tries failed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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

    @classmethod
    def from_evaluation(cls, source: str, evaluation: Evaluation, path: str | None = None) -> ParentInfo:
        timing, correctness = evaluation.timing, evaluation.correctness
        markdown = render_markdown(evaluation.diagnosis) if evaluation.diagnosis is not None else ""
        return cls(source=source, path=path if path is not None else evaluation.candidate, status=evaluation.status,
                   message=evaluation.message, runtime_ms=timing.runtime_ms,
                   speedup_eager=timing.speedup_eager, speedup_compile=timing.speedup_compile,
                   max_abs_error=correctness.max_abs_error, diagnosis_markdown=markdown,
                   max_rel_error=correctness.max_rel_error, mismatch_fraction=correctness.mismatch_fraction,
                   checked=checked_text(evaluation))


def checked_text(evaluation: Evaluation) -> str:
    """What a parent's verdict covers, said plainly: the sizes it was judged at (the file's own only when
    they were), at other sizes where the generalisation check ran, and where its precision was checked."""
    from kfoundry.evaluate.precision_check import describe

    overrides = evaluation.settings.get("set") or {}
    if overrides:
        sizes = ", ".join(f"{name} = {value!r}" for name, value in overrides.items())
        parts = [f"judged at this run's sizes ({sizes}), not at the problem file's own sizes"]
    else:
        parts = ["judged at the problem file's own sizes"]
    if evaluation.other_sizes is not None:
        parts.append(evaluation.other_sizes.summary())
    precision = describe(evaluation.precision)
    if precision:
        parts.append(precision)
    return "; ".join(parts)


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

    @property
    def effective_tolerance(self) -> float:
        if self.tolerance is not None:
            return self.tolerance
        return DEFAULT_TOLERANCE.get(self.precision, DEFAULT_TOLERANCE["fp32"])
