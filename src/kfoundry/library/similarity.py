"""How alike two problem signatures are (0..1): ops in common, kind (recomputed from the ops), and shape
closeness."""

from __future__ import annotations

import math
from typing import Any

from kfoundry.problem_signature import compute_ops, kind_of, problem_class

WEIGHTS = {"ops": 0.5, "kind": 0.3, "shape": 0.2}


def op_set(sig: dict[str, Any]) -> set[str]:
    if sig.get("compute_ops"):
        return set(sig["compute_ops"])
    return set(compute_ops(sig.get("ops", [])))


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def kind_match(a: str | None, b: str | None) -> float:
    """1 for the same kind, 0.5 for the same primary category (softmax vs softmax+pointwise)."""
    if not a or not b:
        return 0.0
    if a == b:
        return 1.0
    return 0.5 if a.split("+")[0] == b.split("+")[0] else 0.0


def kind_label(sig: dict[str, Any]) -> str | None:
    """The signature's kind as this version labels it, from its ops: an entry stored by an older version (a
    pooling problem it called "reduction+pointwise") is labelled anew. Without ops, the stored kind."""
    if sig.get("ops"):
        return kind_of(sig["ops"])
    return sig.get("kind")


def same_class(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two signatures are of the same problem class (problem_signature.problem_class, from the ops);
    False when either says nothing of its problem (no ops and no kind)."""
    if not (a and (a.get("ops") or a.get("kind")) and b and (b.get("ops") or b.get("kind"))):
        return False
    return problem_class(a) == problem_class(b)


def _numel(shape: list[int]) -> int:
    return math.prod(shape) if shape else 1


def _closeness(a: list[dict[str, Any]] | None, b: list[dict[str, Any]] | None) -> float | None:
    if not a or not b:
        return None
    sa, sb = a[0].get("shape", []), b[0].get("shape", [])
    rank = 1.0 if len(sa) == len(sb) else 0.0
    # sizes within a factor of 10^4 count a little; equal sizes count fully
    gap = abs(math.log10(max(_numel(sa), 1)) - math.log10(max(_numel(sb), 1)))
    return 0.5 * rank + 0.5 * max(0.0, 1.0 - gap / 4.0)


def shape_closeness(a: dict[str, Any], b: dict[str, Any]) -> float:
    scores = [s for s in (_closeness(a.get("inputs"), b.get("inputs")),
                          _closeness(a.get("outputs"), b.get("outputs"))) if s is not None]
    return sum(scores) / len(scores) if scores else 0.0


def similarity(a: dict[str, Any], b: dict[str, Any]) -> float:
    if not a or not b:
        return 0.0
    return (WEIGHTS["ops"] * jaccard(op_set(a), op_set(b))
            + WEIGHTS["kind"] * kind_match(kind_label(a), kind_label(b))
            + WEIGHTS["shape"] * shape_closeness(a, b))
