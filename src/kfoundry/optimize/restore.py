"""Reading a run back: the search's individuals from the run store, and what an expert needs to
know about a parent from its stored evaluation."""

from __future__ import annotations

from typing import Any

from kfoundry.diagnose.render import render_markdown
from kfoundry.experts.context import ParentInfo
from kfoundry.runs import RunStore
from kfoundry.search.features import features
from kfoundry.search.individual import Individual
from kfoundry.types import Diagnosis


def fitness_of(evaluation: dict[str, Any] | None) -> float | None:
    """Verified speedup over eager; 1.0 for a correct candidate that was not timed (CPU)."""
    if not evaluation or evaluation.get("status") != "ok":
        return None
    speedup = (evaluation.get("timing") or {}).get("speedup_eager")
    return speedup if speedup is not None else 1.0


def individual_from_store(candidate: dict[str, Any], evaluation: dict[str, Any] | None,
                          diagnosis: dict[str, Any] | None) -> Individual:
    ind = Individual(id=str(candidate["id"]), source=candidate["source"], source_hash=candidate["source_hash"],
                     parent_ids=[str(p) for p in candidate["parent_ids"]], expert=candidate["expert"],
                     island=candidate["island"], generation=candidate["generation"])
    if evaluation is not None:
        ind.status = evaluation["status"]
        ind.fitness = fitness_of(evaluation)
        ind.diagnosis = Diagnosis.from_dict(diagnosis) if diagnosis else None
        ind.features = features(ind.source, ind.diagnosis)
    return ind


def stored_individuals(store: RunStore) -> tuple[dict[str, Individual], dict[str, dict[str, Any]]]:
    """Every candidate of the run as an Individual (pending when its evaluation never finished),
    and the finished evaluations by candidate id."""
    individuals: dict[str, Individual] = {}
    evaluations = {str(cid): row for cid, row in store.finished_evaluations().items()}
    for candidate in store.candidates():
        done = evaluations.get(str(candidate["id"]))
        individuals[str(candidate["id"])] = individual_from_store(
            candidate, done["evaluation"] if done else None, done["diagnosis"] if done else None)
    return individuals, evaluations


def parent_info(ind: Individual, evaluation: dict[str, Any] | None) -> ParentInfo:
    evaluation = evaluation or {}
    timing, correctness = evaluation.get("timing") or {}, evaluation.get("correctness") or {}
    markdown = render_markdown(ind.diagnosis) if ind.diagnosis is not None else ""
    return ParentInfo(source=ind.source, path=f"candidate {ind.id}", status=ind.status,
                      message=evaluation.get("message", ""), runtime_ms=timing.get("runtime_ms"),
                      speedup_eager=timing.get("speedup_eager"), speedup_compile=timing.get("speedup_compile"),
                      max_abs_error=correctness.get("max_abs_error"), diagnosis_markdown=markdown,
                      max_rel_error=correctness.get("max_rel_error"),
                      mismatch_fraction=correctness.get("mismatch_fraction"))
