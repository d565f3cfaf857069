"""Which expert takes the next step, and why.

Rules, in order: no parent -> initializer (or the composer: a Thompson sample when both are
enabled); a failing parent -> repair (the tuner when no LLM
expert is enabled: other tile settings sometimes fix a compile error); no progress for
`stall_limit` steps -> a change of approach (algorithm, or crossover when two parents exist);
with probability `exploration` -> a Thompson sample over the experts' observed success rates; else
the diagnosis's focus; where the diagnosis names no focus (CPU runs are not timed), the sample
decides too. Seeded: the same seed and the same calls give the same choices.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from kfoundry.errors import UsageError
from kfoundry.experts.llm_experts import EXPERTS
from kfoundry.types import Diagnosis

FOCUS_TO_EXPERT = {"memory": "memory", "fusion": "fusion", "launch": "fusion", "compute": "compute",
                   "algorithm": "algorithm", "repair": "repair"}
# experts that need no LLM: the tuner (kfoundry.experts.tuner) and the template composer
# (kfoundry.experts.composer), which writes first kernels
PROGRAMMATIC = ("tuner", "composer")
STARTERS = ("initializer", "composer")  # experts that write a kernel with no parent
# experts that improve a working parent: the pool exploration and stalls draw from
IMPROVERS = ("memory", "compute", "fusion", "algorithm", "crossover", "tuner")
KNOWN = (*EXPERTS, *PROGRAMMATIC)


class Router:
    def __init__(self, experts: Iterable[str] | None = None, exploration: float = 0.1, seed: int | None = None,
                 stall_limit: int = 3):
        names = list(experts) if experts is not None else list(EXPERTS)
        unknown = [n for n in names if n not in KNOWN]
        if unknown:
            raise UsageError(f"unknown expert(s) {', '.join(unknown)}: use some of {', '.join(KNOWN)}")
        if not 0.0 <= exploration <= 1.0:
            raise UsageError("exploration must be between 0 and 1")
        self.experts = names
        self.exploration = exploration
        self.stall_limit = stall_limit
        self._rng = random.Random(seed)
        self._wins = {name: 0 for name in names}
        self._losses = {name: 0 for name in names}

    def record(self, expert: str, success: bool) -> None:
        if expert not in self._wins:
            raise UsageError(f"unknown expert {expert!r} for this router")
        (self._wins if success else self._losses)[expert] += 1

    def stats(self) -> dict[str, tuple[int, int]]:
        """expert -> (successes, failures) recorded so far."""
        return {name: (self._wins[name], self._losses[name]) for name in self.experts}

    def _sample(self, pool: list[str]) -> tuple[str, str]:
        """Thompson sampling with Beta(1 + successes, 1 + failures) priors."""
        draws = {name: self._rng.betavariate(1 + self._wins[name], 1 + self._losses[name]) for name in pool}
        best = max(pool, key=lambda name: draws[name])
        return best, f"{self._wins[best]} success(es) in {self._wins[best] + self._losses[best]} tries"

    def _pool(self, parents_available: int) -> list[str]:
        return [n for n in IMPROVERS if n in self.experts and (n != "crossover" or parents_available >= 2)]

    def _require(self, name: str, why: str) -> tuple[str, str]:
        if name not in self.experts:
            raise UsageError(f"the router needs the {name} expert ({why}) but it is not enabled")
        return name, why

    def choose(self, diagnosis: Diagnosis | None, *, has_parent: bool, parents_available: int = 1,
               stalled_for: int = 0) -> str:
        return self.choose_with_reason(diagnosis, has_parent=has_parent, parents_available=parents_available,
                                       stalled_for=stalled_for)[0]

    def choose_with_reason(self, diagnosis: Diagnosis | None, *, has_parent: bool, parents_available: int = 1,
                           stalled_for: int = 0) -> tuple[str, str]:
        if not has_parent:
            starters = [n for n in STARTERS if n in self.experts]
            if len(starters) > 1:
                name, record = self._sample(starters)
                return name, f"no parent yet: write a first kernel ({name}: {record})"
            return self._require(starters[0] if starters else "initializer", "no parent yet: write a first kernel")
        if diagnosis is not None and diagnosis.status != "ok":
            if "repair" not in self.experts and "tuner" in self.experts:
                return "tuner", f"the parent fails ({diagnosis.status}); no LLM repair expert: other tile settings"
            return self._require("repair", f"the parent fails ({diagnosis.status}): fix it")
        pool = self._pool(parents_available)
        if not pool:
            raise UsageError("the router has no expert that improves a working parent")
        if stalled_for >= self.stall_limit:
            changes = [n for n in ("algorithm", "crossover") if n in pool] or pool
            name, record = self._sample(changes)
            return name, f"no progress for {stalled_for} step(s): change of approach ({name}: {record})"
        if self._rng.random() < self.exploration:
            name, record = self._sample(pool)
            return name, f"exploring: Thompson sample over the experts' success rates ({name}: {record})"
        focus = diagnosis.focus if diagnosis is not None else "none"
        mapped = FOCUS_TO_EXPERT.get(focus)
        if mapped in pool:
            bound = f", {diagnosis.bound}-bound" if diagnosis is not None and diagnosis.bound else ""
            return mapped, f"the diagnosis's focus is {focus}{bound}"
        name, record = self._sample(pool)
        why = "no diagnosis" if diagnosis is None else f"the diagnosis names no usable focus ({focus})"
        return name, f"{why}: Thompson sample over the experts' success rates ({name}: {record})"
