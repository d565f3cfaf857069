"""Which genome moves (kfoundry.experts.composer.genome.MOVES) answer a parent's diagnosis, and what the
experience library learned of them.

The diagnosis's `bound` finding names the rule that bounds the parent on the GPU (kfoundry.diagnose.performance);
each rule points at moves, nearest answer first: launch-bound -> a CUDA graph or a fusion; memory-bound -> a
layout that needs no copy, a fusion; compute below peak on a GEMM -> fewer precision passes or bigger tiles;
register spills -> smaller tiles. A parent whose outputs were wrong takes a costlier, more accurate main loop
first ("accurate"); a correct one takes it last, as it cannot be faster. The other moves follow, those that paid off on problems of the same class
(the library's steps of the genome experts) first, so a budget goes to the likeliest gains before the rest.
"""

from __future__ import annotations

import math
from typing import Any

from kfoundry.experts.composer.genome import MOVES

RULE_MOVES: dict[str, tuple[str, ...]] = {
    "launch-bound": ("graph", "fuse", "tiles_up"),
    "fuse-kernels": ("fuse", "graph"),
    "memory-below-bandwidth": ("layout", "fuse", "tiles_up"),
    "fp32-matmul-below-peak": ("precision", "tiles_up"),
    "compute-below-peak": ("tiles_up", "precision"),
    "compute-bound": ("precision", "tiles_up"),
    "register-spills": ("tiles_down",),
    "low-occupancy-registers": ("tiles_down",),
    "latency-bound": ("tiles_down", "graph"),
    "near-roofline": ("precision", "fuse"),
}
# without a rule (a CPU run is not timed): fusions and cheaper main loops first, as they pay most often
DEFAULT_ORDER = ("fuse", "precision", "tiles_up", "layout", "graph", "tiles_down", "split", "config")
REPAIR_MOVES = ("accurate",)  # a parent with wrong outputs


def bound_rule(diagnosis: Any) -> str | None:
    """The rule of the diagnosis's `bound` finding, if any."""
    findings = getattr(diagnosis, "findings", None) or []
    bound = next((f for f in findings if f.category == "bound"), None)
    return bound.data.get("rule") if bound is not None else None


def moves_for(diagnosis: Any, learned: dict[str, float] | None = None) -> list[str]:
    """Every move, those the diagnosis's rule points at first (a more accurate main loop where the outputs were
    wrong), then by the gain the library saw (higher first), then in DEFAULT_ORDER, then the rest of MOVES."""
    wrong = getattr(diagnosis, "status", None) == "wrong_output"
    first = list(REPAIR_MOVES if wrong else RULE_MOVES.get(bound_rule(diagnosis) or "", ()))
    learned = learned or {}
    rest = sorted((m for m in DEFAULT_ORDER if m not in first), key=lambda m: -learned.get(m, 1.0))
    return first + rest + [m for m in MOVES if m not in first and m not in rest]


def move_gains(records: list[dict[str, Any]]) -> dict[str, float]:
    """From the library's genome steps ({"move", "speedup_before", "speedup_after"}): per move kind, the
    geometric mean of after / before over the steps that were timed."""
    logs: dict[str, list[float]] = {}
    for record in records or []:
        kind = (record.get("move") or {}).get("kind")
        before, after = record.get("speedup_before"), record.get("speedup_after")
        if not kind or not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in (before, after)):
            continue
        logs.setdefault(kind, []).append(math.log(after / before))
    return {kind: math.exp(sum(values) / len(values)) for kind, values in logs.items()}
