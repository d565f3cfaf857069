"""The tuner as an expert (no LLM): a parent's tunable constants changed (kfoundry.experts.tuner), or on
some turns its dot precision switched; the first variant the search has not seen is proposed. A step that made
its children much slower in this run is not taken again (genome_moves.StepLog)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kfoundry.experts.base import RETRIES, Proposal, Step, Traits
from kfoundry.experts.composer.genome import PRECISION_COST
from kfoundry.experts.genome_moves import Change, StepLog
from kfoundry.experts.tuner import DOT_PRECISIONS, PRECISION_NAME, guidance, precision_variants, tune, tuning_record
from kfoundry.random_state import random_state_from_json, random_state_to_json
from kfoundry.types import DeviceFacts

TUNER_TRIES = 6  # variants asked of the tuner at once: the first one not seen before is taken
PRECISION_SHARE = 0.25  # of the tuner's turns on a parent that spells a dot precision: switch it


def _steps(changes: Any) -> list[Change]:
    """A tuner record's changes ({"BK": {"from": 64, "to": 32}}) as steps."""
    steps = []
    for name, change in (changes.items() if isinstance(changes, dict) else []):
        if isinstance(change, dict) and isinstance(change.get("from"), int) and isinstance(change.get("to"), int):
            steps.append((str(name), change["from"], change["to"]))
    return steps


@dataclass
class TunerExpert:
    is_known: Callable[[str], bool]  # source -> already in the search
    device: DeviceFacts | None = None
    seed: int = 0
    preferred: dict[str, int] = field(default_factory=dict)  # settings that helped on similar problems
    name: str = "tuner"
    traits: Traits = Traits(repair=RETRIES, small_edits=True)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed + 1)
        self.run = StepLog()

    def observe(self, child: Any, parent: Any) -> None:
        """A child of the tuner was judged: what its steps did to the parent's speed."""
        changes = (getattr(child, "record", None) or {}).get("changes")
        if changes and parent is not None and getattr(parent, "ok", False):
            self.run.observe(_steps(changes), parent.fitness, child.fitness, child.ok)

    async def propose(self, step: Step) -> Proposal:
        parent = step.parent
        if parent is None:
            return Proposal(None, why=step.reason)
        switched = precision_variants(parent.source)
        if getattr(parent, "status", None) == "ok":  # a correct parent: only a cheaper main loop can be faster
            switched = [v for v in switched if cheaper(v.changes[PRECISION_NAME])]
        remembered = self.preferred.get(PRECISION_NAME) if isinstance(self.preferred, dict) else None
        first = [v for v in switched if v.changes[PRECISION_NAME][1] == remembered]
        if switched and (first or self.rng.random() < PRECISION_SHARE):
            switched = first + [v for v in self.rng.sample(switched, len(switched)) if v not in first]
        else:
            switched = []

        guide = guidance(getattr(parent, "diagnosis", None))
        strict = out_of_resource(parent)
        harmful = self.run.harmful()
        switched = [v for v in switched if not any((n, *c) in harmful for n, c in v.changes.items())]

        def retuned():  # a generator: the tunables are read only when no precision switch is new
            yield from tune(parent.source, self.rng, device=self.device, n=TUNER_TRIES, preferred=self.preferred,
                            guide=guide, strict=strict, avoid=harmful)

        for variant in itertools.chain(switched, retuned()):
            if not self.is_known(variant.source):
                record = {"changes": tuning_record(variant.changes), "summary": variant.summary,
                          "origin": variant.origin}
                if variant.origin == "guided":
                    record["guided_by"] = guide.rule
                return Proposal(variant.source, [parent.id], record, why=step.reason)
        return Proposal(None, why=step.reason)

    def state(self) -> dict:
        return {"rng": random_state_to_json(self.rng), "steps": self.run.state()}

    def restore(self, data: dict | list | None) -> None:
        if isinstance(data, list):  # a run saved before the steps were kept: the random state alone
            data = {"rng": data}
        if data:
            self.rng.setstate(random_state_from_json(data["rng"]))
            self.run = StepLog.restore(data.get("steps"))


def cheaper(change: tuple[int, int]) -> bool:
    """A dot precision switch (old, new), by index in DOT_PRECISIONS, to a main loop of fewer passes: the cost
    order the genome's precision moves follow too."""
    old, new = (PRECISION_COST[DOT_PRECISIONS[i]] for i in change)
    return new < old


def out_of_resource(parent: Any) -> bool:
    """The parent failed to compile for want of shared memory or threads (Triton's OutOfResources)."""
    info = getattr(parent, "parent_info", None)
    message = getattr(info, "message", "") or ""
    return getattr(parent, "status", "") == "compile_error" and "out of resource" in message.lower()


def state_of(experts: list[Any]) -> Any:
    """The tuner's state among `experts` (its random state and its steps; None without a tuner): what a resumed
    run restores."""
    return next((e.state() for e in experts if isinstance(e, TunerExpert)), None)


def restore_in(experts: list[Any], data: Any) -> None:
    """`state_of`'s value back into the tuner among `experts`."""
    for expert in experts:
        if isinstance(expert, TunerExpert):
            expert.restore(data)
