"""Which expert takes the next step, and why. It reads the experts' traits (kfoundry.experts.base),
never their names, and keeps the order it is given (the registry's) for its draws.

Rules, in order: no parent -> an expert that starts (a Thompson sample when several do); a failing
parent -> one that fixes failures from their diagnosis (else one that retries other settings: other
tile settings sometimes fix a compile error); no progress for `stall_limit` steps -> a change of
approach; with probability `exploration` -> a Thompson sample over the improvers' observed success
rates; else the expert whose focus is the diagnosis's; where the diagnosis names no focus (CPU runs
are not timed), the sample decides too. Seeded: the same seed and the same calls give the same choices.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.experts.base import FIXES, RETRIES, Expert
from kfoundry.random_state import random_state_from_json, random_state_to_json


class Router:
    def __init__(self, experts: Iterable[Expert] | None = None, exploration: float = 0.1, seed: int | None = None,
                 stall_limit: int = 3):
        if experts is None:  # the LLM experts, as `kfoundry generate` chooses among them
            from kfoundry.experts.llm_experts import EXPERTS

            experts = EXPERTS.values()
        self.experts: list[Expert] = list(experts)
        if not 0.0 <= exploration <= 1.0:
            raise UsageError("exploration must be between 0 and 1")
        self.exploration = exploration
        self.stall_limit = stall_limit
        self._rng = random.Random(seed)
        self._wins = {e.name: 0 for e in self.experts}
        self._losses = {e.name: 0 for e in self.experts}

    def record(self, expert: str, success: bool, child: Any = None, parent: Any = None) -> None:
        """One judged child of `expert`: a success (it beat its parent) or not; an expert that learns from its
        children's verdicts within a run (an `observe(child, parent)` method) is shown the child."""
        if expert not in self._wins:
            raise UsageError(f"unknown expert {expert!r} for this router")
        (self._wins if success else self._losses)[expert] += 1
        if child is not None:
            for e in self.experts:
                if e.name == expert and hasattr(e, "observe"):
                    e.observe(child, parent)

    def stats(self) -> dict[str, tuple[int, int]]:
        """expert name -> (successes, failures) recorded so far."""
        return {e.name: (self._wins[e.name], self._losses[e.name]) for e in self.experts}

    def state(self) -> dict[str, Any]:
        """JSON-serializable: the counts and the random state."""
        return {"stats": {name: list(counts) for name, counts in self.stats().items()},
                "rng": random_state_to_json(self._rng)}

    def restore(self, data: dict[str, Any]) -> None:
        """From `state()`; counts of an expert this router does not hold are left out."""
        for name, (wins, losses) in (data.get("stats") or {}).items():
            if name in self._wins:
                self._wins[name], self._losses[name] = wins, losses
        if data.get("rng"):
            self._rng.setstate(random_state_from_json(data["rng"]))

    def starts(self) -> bool:
        """Whether an enabled expert writes a kernel with no parent."""
        return any(e.traits.starts for e in self.experts)

    def writes_new_first_kernels(self) -> bool:
        """Whether an enabled expert writes a new first kernel whenever asked (an LLM's initializer), rather
        than from a list it has (the composer's)."""
        return any(e.traits.starts and e.traits.needs_llm for e in self.experts)

    def _sample(self, pool: list[Expert]) -> tuple[Expert, str]:
        """Thompson sampling with Beta(1 + successes, 1 + failures) priors."""
        draws = {e.name: self._rng.betavariate(1 + self._wins[e.name], 1 + self._losses[e.name]) for e in pool}
        best = max(pool, key=lambda e: draws[e.name])
        wins, losses = self._wins[best.name], self._losses[best.name]
        return best, f"{wins} success(es) in {wins + losses} tries"

    def _pool(self, parents_available: int) -> list[Expert]:
        return [e for e in self.experts if e.traits.improves and e.traits.min_parents <= max(1, parents_available)]

    def choose(self, diagnosis: Any, *, has_parent: bool, parents_available: int = 1, stalled_for: int = 0) -> Expert:
        return self.choose_with_reason(diagnosis, has_parent=has_parent, parents_available=parents_available,
                                       stalled_for=stalled_for)[0]

    def choose_with_reason(self, diagnosis: Any, *, has_parent: bool, parents_available: int = 1,
                           stalled_for: int = 0) -> tuple[Expert, str]:
        """`diagnosis`: the parent's (kfoundry.types.Diagnosis), or None."""
        if not has_parent:
            starters = [e for e in self.experts if e.traits.starts]
            if len(starters) > 1:
                expert, record = self._sample(starters)
                return expert, f"no parent yet: write a first kernel ({expert.name}: {record})"
            if not starters:
                raise UsageError("the router needs an expert that writes a first kernel, such as the initializer "
                                 "expert (no parent yet), but none is enabled")
            return starters[0], "no parent yet: write a first kernel"
        if diagnosis is not None and diagnosis.status != "ok":
            fixers = [e for e in self.experts if e.traits.repair == FIXES]
            if fixers:
                return fixers[0], f"the parent fails ({diagnosis.status}): fix it"
            retriers = [e for e in self.experts if e.traits.repair == RETRIES]
            if retriers:
                return retriers[0], (f"the parent fails ({diagnosis.status}); no LLM repair expert: other tile "
                                     "settings")
            raise UsageError(f"the router needs the repair expert (the parent fails ({diagnosis.status}): fix it) "
                             "but it is not enabled")
        pool = self._pool(parents_available)
        if not pool:
            raise UsageError("the router has no expert that improves a working parent")
        if stalled_for >= self.stall_limit:
            changes = [e for e in pool if e.traits.changes_approach] or pool
            expert, record = self._sample(changes)
            return expert, f"no progress for {stalled_for} step(s): change of approach ({expert.name}: {record})"
        if self._rng.random() < self.exploration:
            expert, record = self._sample(pool)
            return expert, f"exploring: Thompson sample over the experts' success rates ({expert.name}: {record})"
        focus = diagnosis.focus if diagnosis is not None else "none"
        mapped = next((e for e in pool if focus in e.traits.focus), None)
        if mapped is not None:
            bound = f", {diagnosis.bound}-bound" if diagnosis is not None and diagnosis.bound else ""
            return mapped, f"the diagnosis's focus is {focus}{bound}"
        expert, record = self._sample(pool)
        why = "no diagnosis" if diagnosis is None else f"the diagnosis names no usable focus ({focus})"
        return expert, f"{why}: Thompson sample over the experts' success rates ({expert.name}: {record})"
