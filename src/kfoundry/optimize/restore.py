"""Reading a run back: the search's individuals from the run store."""

from __future__ import annotations

from typing import Any

from kfoundry.optimize.outcome import stored_outcome
from kfoundry.runs import RunStore
from kfoundry.search.features import features
from kfoundry.search.individual import Individual


def individual_from_store(candidate: dict[str, Any], evaluation: dict[str, Any] | None,
                          diagnosis: dict[str, Any] | None) -> Individual:
    ind = Individual(id=str(candidate["id"]), source=candidate["source"], source_hash=candidate["source_hash"],
                     parent_ids=[str(p) for p in candidate["parent_ids"]], expert=candidate["expert"],
                     island=candidate["island"], generation=candidate["generation"])
    if evaluation is not None:
        done = stored_outcome(evaluation, diagnosis, ind.source, ind.id)
        ind.status, ind.fitness, ind.diagnosis = done.status, done.fitness, done.diagnosis
        ind.roofline, ind.parent_info = done.roofline, done.parent_info
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


def verdicts_missing_baselines(evaluations: dict[str, dict[str, Any]], device: str | None) -> dict[str, tuple[int, Any]]:
    """Stored verdicts a stopped session gave before all its baselines were measured (torch.compile's modes
    compile for minutes): candidate id -> (evaluation id, Evaluation), for the resumed session to complete as it
    completes its own. Only those timed on a device of the same name, whose baselines this session measures."""
    from kfoundry.types import Evaluation

    found: dict[str, tuple[int, Any]] = {}
    for cid, row in evaluations.items():
        data = row.get("evaluation") or {}
        timing = data.get("timing") or {}
        if timing.get("baselines_pending") and timing.get("candidate") and device and timing.get("device") == device:
            found[cid] = (int(row["id"]), Evaluation.from_dict(data))
    return found
