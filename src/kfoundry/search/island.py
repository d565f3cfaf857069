"""One island: a bounded population of working candidates that keeps its elites and the best of each
MAP-Elites cell, plus the failing candidates still worth a repair."""

from __future__ import annotations

import random
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.search.features import cell
from kfoundry.search.individual import Individual
from kfoundry.search.selection import select


class Island:
    def __init__(self, index: int = 0, *, capacity: int = 16, elites: int = 4, max_repair_tries: int = 2,
                 max_failed: int = 8, selection: str = "tournament", tournament_size: int = 3,
                 exploration: float = 0.1, seen: dict[str, str] | None = None):
        if capacity < 1 or elites < 0 or elites > capacity:
            raise UsageError("an island needs capacity >= 1 and 0 <= elites <= capacity")
        self.index = index
        self.capacity = capacity
        self.elites = elites
        self.max_repair_tries = max_repair_tries
        self.max_failed = max_failed
        self.selection = selection
        self.tournament_size = tournament_size
        self.exploration = exploration
        # source hash -> id of every candidate ever inserted; shared by all islands of a search
        self.seen: dict[str, str] = seen if seen is not None else {}
        self.population: list[Individual] = []  # working candidates, in insertion order
        self.failed: list[Individual] = []  # failing candidates with repair tries left
        self.best_fitness: float | None = None
        self.stalled = 0  # generations since this island's best improved (the router's stalled_for)
        self._improved = False

    # -- membership ---------------------------------------------------------------------------

    def __contains__(self, ind: Individual) -> bool:
        return any(m.id == ind.id for m in self.population) or any(m.id == ind.id for m in self.failed)

    def is_duplicate(self, ind: Individual) -> bool:
        """Identical code under another id anywhere in the search, or this very candidate already here."""
        owner = self.seen.get(ind.source_hash)
        return (owner is not None and owner != ind.id) or ind in self

    def insert(self, ind: Individual) -> bool:
        """Add an evaluated candidate; False (and nothing changes) for a duplicate or a pending one."""
        if ind.status == "pending" or self.is_duplicate(ind):
            return False
        self.seen[ind.source_hash] = ind.id
        if ind.ok:
            self._add(ind)
        else:
            if ind.repair_tries < self.max_repair_tries:
                self.failed.append(ind)
                del self.failed[:-self.max_failed]  # the oldest failures go first
        return True

    def receive(self, migrant: Individual) -> bool:
        """Take a working migrant from another island (it is already in `seen` under its own id)."""
        if not migrant.ok or migrant in self:
            return False
        self._add(migrant)
        return True

    def _add(self, ind: Individual) -> None:
        self.population.append(ind)
        self._evict()
        if self.best_fitness is None or ind.fitness > self.best_fitness:
            self.best_fitness = ind.fitness
            self._improved = True

    def protected(self) -> set[str]:
        """Ids never evicted: the top-`elites` by fitness and the best of each MAP-Elites cell."""
        ranked = self.ranked()
        keep = {ind.id for ind in ranked[:self.elites]}
        champions: dict[tuple, Individual] = {}
        for ind in ranked:
            champions.setdefault(cell(ind.features), ind)
        return keep | {ind.id for ind in champions.values()}

    def _evict(self) -> None:
        while len(self.population) > self.capacity:
            ranked = self.ranked()
            elites = {ind.id for ind in ranked[:self.elites]}
            protected = self.protected()
            # worst unprotected first; when every member guards a cell, the worst cell champion goes
            victims = [i for i in reversed(ranked) if i.id not in protected] or \
                      [i for i in reversed(ranked) if i.id not in elites]
            self.population.remove(victims[0])

    def ranked(self) -> list[Individual]:
        """Best first; among equals the older one first (sorted is stable over insertion order)."""
        return sorted(self.population, key=lambda ind: -(ind.fitness or 0.0))

    def best(self) -> Individual | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def elite_members(self) -> list[Individual]:
        return self.ranked()[:max(self.elites, 1)]

    def end_generation(self) -> None:
        self.stalled = 0 if self._improved else self.stalled + 1
        self._improved = False

    # -- parents ------------------------------------------------------------------------------

    def select_parent(self, rng: random.Random) -> Individual | None:
        return select(self.population, rng, self.selection, self.tournament_size, self.exploration)

    def repairable(self) -> list[Individual]:
        return [ind for ind in self.failed if ind.repair_tries < self.max_repair_tries]

    def select_repair(self, rng: random.Random) -> Individual | None:
        candidates = self.repairable()
        return rng.choice(candidates) if candidates else None

    def note_repair(self, ind: Individual) -> None:
        """Count one repair attempt on a failing parent; it leaves the pool when its tries are spent."""
        ind.repair_tries += 1
        if ind.repair_tries >= self.max_repair_tries and ind in self.failed:
            self.failed.remove(ind)

    # -- snapshot -----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {"index": self.index,
                "members": [{"id": ind.id, "fitness": ind.fitness} for ind in self.population],
                "failed": [{"id": ind.id, "repair_tries": ind.repair_tries} for ind in self.failed],
                "best_fitness": self.best_fitness, "stalled": self.stalled}

    def restore(self, snapshot: dict[str, Any], individuals_by_id: dict[str, Individual]) -> None:
        self.population = [individuals_by_id[m["id"]] for m in snapshot["members"]]
        self.failed = []
        for entry in snapshot["failed"]:
            ind = individuals_by_id[entry["id"]]
            ind.repair_tries = entry["repair_tries"]
            self.failed.append(ind)
        self.best_fitness = snapshot["best_fitness"]
        self.stalled = snapshot["stalled"]
        self._improved = False
