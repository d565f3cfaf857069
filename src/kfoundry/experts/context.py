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

    @classmethod
    def from_evaluation(cls, source: str, evaluation: Evaluation, path: str | None = None) -> ParentInfo:
        timing, correctness = evaluation.timing, evaluation.correctness
        markdown = render_markdown(evaluation.diagnosis) if evaluation.diagnosis is not None else ""
        return cls(source=source, path=path if path is not None else evaluation.candidate, status=evaluation.status,
                   message=evaluation.message, runtime_ms=timing.runtime_ms,
                   speedup_eager=timing.speedup_eager, speedup_compile=timing.speedup_compile,
                   max_abs_error=correctness.max_abs_error, diagnosis_markdown=markdown,
                   max_rel_error=correctness.max_rel_error, mismatch_fraction=correctness.mismatch_fraction)


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
