"""The one place an evaluation becomes what the search and the experts use: the search's Outcome
(fitness: the verified speedup over eager, 1.0 for a correct candidate that was not timed (CPU), None
for a failing one; the fraction of the roofline reached) with the experts' ParentInfo in it."""

from __future__ import annotations

from typing import Any

from kfoundry.diagnose.performance import roofline
from kfoundry.experts.context import ParentInfo
from kfoundry.search.queue import Outcome
from kfoundry.types import Diagnosis, Evaluation


def fitness(evaluation: Evaluation) -> float | None:
    if not evaluation.ok:
        return None
    speedup = evaluation.timing.speedup_eager
    return speedup if speedup is not None else 1.0


def outcome(evaluation: Evaluation, source: str, candidate_id: str) -> Outcome:
    data = roofline(evaluation) if evaluation.ok else None
    return Outcome(evaluation.status, fitness(evaluation), evaluation.diagnosis,
                   roofline=data["fraction_of_roofline"] if data else None,
                   parent_info=ParentInfo.from_evaluation(source, evaluation, path=f"candidate {candidate_id}"))


def stored_outcome(evaluation: dict[str, Any], diagnosis: dict[str, Any] | None, source: str,
                   candidate_id: str) -> Outcome:
    """The outcome of an evaluation as the run store keeps it (its dict, and its diagnosis's)."""
    record = Evaluation.from_dict({**evaluation, "diagnosis": None})
    record.diagnosis = Diagnosis.from_dict(diagnosis) if diagnosis else None
    return outcome(record, source, candidate_id)
