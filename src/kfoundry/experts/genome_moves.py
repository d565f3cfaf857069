"""Which genome moves (kfoundry.experts.composer.genome.MOVES) answer a parent's diagnosis, and what the
experience library learned of them.

The diagnosis's `bound` finding names the rule that bounds the parent on the GPU (kfoundry.diagnose.performance);
each rule points at moves, nearest answer first: launch-bound -> a CUDA graph or a fusion; memory-bound -> a
layout that needs no copy, a fusion; compute below peak on a GEMM -> fewer precision passes, K split over more
programs (where the output's tiles are too few to fill the GPU), bigger tiles, then the same main loop's other
configurations, then a reduction out of the product's epilogue; latency-bound -> split-K or smaller tiles;
register spills -> smaller tiles. A parent whose outputs were wrong takes a costlier, more accurate main loop
first ("accurate"); a correct one takes it last, as it cannot be faster. The other moves follow, those that paid
off on problems of the same class (the library's steps of the genome experts) first, so a budget goes to the
likeliest gains before the rest.

Within a run, what each move did to its parents' speed so far (`MoveSteps`) joins what the library saw, and a
move that has lost clearly in this run (twice or more, at a geometric mean under LOSING) goes last, even one
the diagnosis names. Below the moves, `StepLog` keeps what each single step (a gene's or a tunable's old value
to its new one) did, so that a step that made its children slower or wrong is not taken again.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kfoundry.experts.composer.genome import MOVES

RULE_MOVES: dict[str, tuple[str, ...]] = {
    "launch-bound": ("graph", "fuse", "tiles_up"),
    "fuse-kernels": ("fuse", "graph"),
    "memory-below-bandwidth": ("layout", "fuse", "tiles_up"),
    # "config": the same precision in other tile shapes, tile groups, a persistent kernel (genome._kernel_moves);
    # "split": a reduction over a product's features out of its epilogue, which held one tile to the whole row
    # (network_suite 11 on an H100, 2026-12-06: 1.83x -> 2.33x eager, found only in the fifth generation)
    # "split_k": K shared by more programs a tile, where the output's tiles leave multiprocessors idle (offered only
    # there: a GEMM without split-K configurations has no such neighbour, and the move is skipped)
    "fp32-matmul-below-peak": ("precision", "split_k", "tiles_up", "config", "split"),
    "compute-below-peak": ("split_k", "tiles_up", "precision", "config", "split"),
    "compute-bound": ("precision", "split_k", "tiles_up", "config", "split"),
    "register-spills": ("tiles_down",),
    "low-occupancy-registers": ("tiles_down",),
    "latency-bound": ("split_k", "tiles_down", "graph"),
    "near-roofline": ("precision", "fuse"),
}
# without a rule (a CPU run is not timed): fusions and cheaper main loops first, as they pay most often
DEFAULT_ORDER = ("fuse", "precision", "split_k", "tiles_up", "layout", "graph", "tiles_down", "split", "config")
REPAIR_MOVES = ("accurate",)  # a parent with wrong outputs


FAILED_RATIO = 0.5  # a child that failed (its parent correct) counts as this speed ratio: an evaluation spent
PRIOR_WEIGHT = 2.0  # the library's gain (or 1.0 without one) counts as this many of the run's own steps
LOSING = 0.8  # a move whose steps in this run average below this ratio, over two or more, goes last


@dataclass
class MoveSteps:
    """What each genome move did: the log of child / parent speed of every step, per move kind (this run's
    steps, or the library's)."""

    logs: dict[str, list[float]] = field(default_factory=dict)

    def add(self, kind: str, ratio: float) -> None:
        self.logs.setdefault(kind, []).append(math.log(ratio))

    def observe(self, kind: str, parent_fitness: float | None, child_fitness: float | None, child_ok: bool) -> None:
        """A judged child of a move in this run (a failed one counts FAILED_RATIO)."""
        ratio = speed_ratio(parent_fitness, child_fitness, child_ok)
        if kind in MOVES and ratio is not None:
            self.add(kind, ratio)

    def geomeans(self) -> dict[str, float]:
        return {kind: math.exp(sum(logs) / len(logs)) for kind, logs in self.logs.items()}

    def blended(self, learned: dict[str, float] | None) -> dict[str, float]:
        """Per move: the run's steps and the library's gain (PRIOR_WEIGHT steps' worth) as one geometric mean."""
        learned = learned or {}
        out = dict(learned)
        for kind, logs in self.logs.items():
            prior = math.log(learned.get(kind, 1.0))
            out[kind] = math.exp((sum(logs) + PRIOR_WEIGHT * prior) / (len(logs) + PRIOR_WEIGHT))
        return out

    def losing(self) -> set[str]:
        return {kind for kind, gain in self.geomeans().items() if len(self.logs[kind]) >= 2 and gain < LOSING}

    def state(self) -> dict[str, list[float]]:
        return {kind: list(logs) for kind, logs in self.logs.items()}

    @classmethod
    def restore(cls, data: dict | None) -> MoveSteps:
        return cls({str(k): [float(x) for x in v] for k, v in (data or {}).items()})


Change = tuple[str, Any, Any]  # a gene's (or a tunable's) name, its old value, its new value (JSON scalars)


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, (list, tuple)) else value


@dataclass
class StepLog:
    """What each step did in this run: the log of child / parent speed of every judged child whose change held the
    step (a failed child counts FAILED_RATIO). A step is harmful once the children that changed it alone ran under
    LOSING x their parents on geometric mean, or two or more children that held it did; a step that alone was not
    harmful is not blamed for the steps beside it. The tuner keeps one of its tunables (16 warps on a GEMM tile ran
    its children at 0.26-0.46x, and it was drawn up to six times a run), recompose one of its genes (on the H100,
    benchmarks/suite 12 spent 7 of 32 evaluations on children that took a GEMM's BK from 32 to 64, and every one
    was wrong on the guard's outlier inputs)."""

    alone: dict[Change, list[float]] = field(default_factory=dict)
    held: dict[Change, list[float]] = field(default_factory=dict)

    def observe(self, steps: list[Change], parent_fitness: float | None, child_fitness: float | None,
                child_ok: bool) -> None:
        ratio = speed_ratio(parent_fitness, child_fitness, child_ok)
        if not steps or ratio is None:
            return
        for name, old, new in steps:
            step = (name, _hashable(old), _hashable(new))
            self.held.setdefault(step, []).append(math.log(ratio))
            if len(steps) == 1:
                self.alone.setdefault(step, []).append(math.log(ratio))

    def harmful(self) -> set[Change]:
        bar = math.log(LOSING)
        alone = {step for step, logs in self.alone.items() if sum(logs) / len(logs) < bar}
        return alone | {step for step, logs in self.held.items()  # a step fine alone is not blamed for others
                        if len(logs) >= 2 and sum(logs) / len(logs) < bar and (step in alone or step not in self.alone)}

    def state(self) -> dict[str, list]:
        return {name: [[*step, logs] for step, logs in table.items()]
                for name, table in (("alone", self.alone), ("held", self.held))}

    @classmethod
    def restore(cls, data: dict | None) -> StepLog:
        def table(rows: Any) -> dict[Change, list[float]]:
            return {(str(n), _hashable(old), _hashable(new)): [float(x) for x in logs]
                    for n, old, new, logs in rows or []}
        data = data or {}
        return cls(table(data.get("alone")), table(data.get("held")))


def gene_steps(changed: Any) -> list[Change]:
    """A genome move's changed genes ({"gemm_0.BK": [64, 32]}, as `diff` gives them) as steps."""
    return [(str(gene), pair[0], pair[1]) for gene, pair in (changed.items() if isinstance(changed, dict) else [])
            if isinstance(pair, (list, tuple)) and len(pair) == 2]


def speed_ratio(parent_fitness: float | None, child_fitness: float | None, child_ok: bool) -> float | None:
    """A judged child's speed over its parent's, FAILED_RATIO for a failed child; None without a parent speed."""
    if not parent_fitness or parent_fitness <= 0:
        return None
    return child_fitness / parent_fitness if child_ok and child_fitness and child_fitness > 0 else FAILED_RATIO


def kernel_shares(diagnosis: Any, functions: dict[str, str]) -> dict[str, float]:
    """Kernel (group) name -> its share of the GPU time in the diagnosis's profile (the `kernels` finding; a
    function several kernels launch shares its time among them evenly), from `functions` (kernel name -> the
    function it launches). {} without a timed profile (a CPU verdict)."""
    findings = getattr(diagnosis, "findings", None) or []
    rows = next((f.data["kernels"] for f in findings if f.category == "kernels" and isinstance(f.data, dict)
                 and f.data.get("kernels")), None)
    if not rows or not functions or any(r.get("time_us") is None or r.get("share") is None for r in rows):
        return {}
    by_function = {r.get("name"): float(r["share"]) for r in rows}
    users = Counter(functions.values())
    return {kernel: by_function.get(function, 0.0) / users[function] for kernel, function in functions.items()}


def bound_rule(diagnosis: Any) -> str | None:
    """The rule of the diagnosis's `bound` finding, if any."""
    findings = getattr(diagnosis, "findings", None) or []
    bound = next((f for f in findings if f.category == "bound"), None)
    return bound.data.get("rule") if bound is not None else None


def moves_for(diagnosis: Any, learned: dict[str, float] | None = None, run: MoveSteps | None = None) -> list[str]:
    """Every move, those the diagnosis's rule points at first (a more accurate main loop where the outputs were
    wrong), then by the gain the library saw and this run's steps (higher first), then in DEFAULT_ORDER, then
    the rest of MOVES; the moves losing in this run last."""
    wrong = getattr(diagnosis, "status", None) == "wrong_output"
    first = list(REPAIR_MOVES if wrong else RULE_MOVES.get(bound_rule(diagnosis) or "", ()))
    gains = run.blended(learned) if run is not None else (learned or {})
    rest = sorted((m for m in DEFAULT_ORDER if m not in first), key=lambda m: -gains.get(m, 1.0))
    order = first + rest + [m for m in MOVES if m not in first and m not in rest]
    losing = run.losing() if run is not None else set()
    return [m for m in order if m not in losing] + [m for m in order if m in losing]


def move_gains(records: list[dict[str, Any]]) -> dict[str, float]:
    """From the library's genome steps ({"move", "speedup_before", "speedup_after"}): per move kind, the
    geometric mean of after / before over the steps that were timed."""
    steps = MoveSteps()
    for record in records or []:
        kind = (record.get("move") or {}).get("kind")
        before, after = record.get("speedup_before"), record.get("speedup_after")
        if kind and all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in (before, after)):
            steps.add(kind, after / before)
    return steps.geomeans()
