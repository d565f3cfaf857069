"""K islands, one registry of seen code, migration between them (ring or all-to-all), and the reseeding of
islands that lag far behind."""

from __future__ import annotations

from typing import Any

from kfoundry.errors import UsageError
from kfoundry.search.individual import Individual, source_hash
from kfoundry.search.island import Island

TOPOLOGIES = ("ring", "all-to-all")
# an island whose best reaches less than this share of the search's best fitness, and did not improve in the
# generation just ended, is reseeded from the search's best: on conv_suite 18 (H100, 2026-12-05) two of four
# islands started from TF32x3 variants 1.7x slower than the fp16 ones and took 14 of the 28 children
LAGGING = 0.6


class Archipelago:
    def __init__(self, k: int = 4, *, topology: str = "ring", migrate_every: int = 5, capacity: int = 16,
                 elites: int = 4, max_repair_tries: int = 2, max_failed: int = 8, selection: str = "tournament",
                 tournament_size: int = 3, exploration: float = 0.1):
        if k < 1:
            raise UsageError("an archipelago needs at least one island")
        if topology not in TOPOLOGIES:
            raise UsageError(f"unknown topology {topology!r}: use one of {', '.join(TOPOLOGIES)}")
        if migrate_every < 1:
            raise UsageError("migrate_every must be at least 1 generation")
        self.topology = topology
        self.migrate_every = migrate_every
        self.seen: dict[str, str] = {}  # source hash -> id, across all islands
        self.sent: set[tuple[str, int]] = set()  # (migrant id, destination island) already sent
        self.islands = [Island(i, capacity=capacity, elites=elites, max_repair_tries=max_repair_tries,
                               max_failed=max_failed, selection=selection, tournament_size=tournament_size,
                               exploration=exploration, seen=self.seen) for i in range(k)]

    def __len__(self) -> int:
        return len(self.islands)

    def seen_source(self, source: str) -> bool:
        return source_hash(source) in self.seen

    def insert(self, ind: Individual) -> bool:
        """Into the island it was born on."""
        return self.islands[ind.island].insert(ind)

    def best(self) -> Individual | None:
        bests = [b for b in (island.best() for island in self.islands) if b is not None]
        return max(bests, key=lambda ind: ind.fitness) if bests else None

    def destinations(self, index: int) -> list[int]:
        k = len(self.islands)
        if k == 1:
            return []
        if self.topology == "ring":
            return [(index + 1) % k]
        return [j for j in range(k) if j != index]

    def migrate(self) -> list[tuple[str, int, int]]:
        """Copy each island's best to its destinations; (id, from, to) for each migrant that moved.

        The bests are taken before any island receives, so a migrant travels one hop per round;
        a migrant already sent to an island (or already there) is never sent there again."""
        bests = [(island.index, island.best()) for island in self.islands]
        moved = []
        for source, best in bests:
            if best is None:
                continue
            for dest in self.destinations(source):
                island = self.islands[dest]
                if (best.id, dest) in self.sent or best in island:
                    continue
                self.sent.add((best.id, dest))
                island.receive(best)
                moved.append((best.id, source, dest))
        return moved

    def reseed_lagging(self, first_population: bool = False) -> list[tuple[int, str, list[str]]]:
        """Each stalled island whose best is below LAGGING x the search's best: its members below that line
        leave it and the search's best joins it. (island, the best's id, the ids that left) for each.
        `first_population`: right after the first population, where no island has had a generation to stall,
        an island whose correct start is that far behind is reseeded at once: its start is a variant with a
        costlier main loop, and children that tune tiles did not close such a gap (conv_suite 18 on 2026-12-05:
        6 of the first 13 children on an H100, 7 of the first 15 on the H200, went to the islands of TF32x3
        starts, none near the best; a whole search gained at most 1.41x). An island with no correct member
        keeps its own for repair."""
        best = self.best()
        if best is None or len(self.islands) == 1:
            return []
        line = LAGGING * best.fitness
        reseeded = []
        for island in self.islands:
            own = island.best()
            if own is None or own.fitness >= line or (island.stalled < 1 and not first_population):
                continue
            gone = [ind.id for ind in island.population if ind.fitness < line]
            island.population = [ind for ind in island.population if ind.fitness >= line]
            island.best_fitness = max((ind.fitness for ind in island.population), default=None)
            island.receive(best)
            reseeded.append((island.index, best.id, gone))
        return reseeded

    def state(self) -> dict[str, Any]:
        return {"islands": [island.state() for island in self.islands], "seen": dict(self.seen),
                "sent": sorted([ind_id, dest] for ind_id, dest in self.sent)}

    def restore(self, snapshot: dict[str, Any], individuals_by_id: dict[str, Individual]) -> None:
        if len(snapshot["islands"]) != len(self.islands):
            raise UsageError(f"the snapshot has {len(snapshot['islands'])} islands; this search has "
                             f"{len(self.islands)}")
        self.seen.clear()
        self.seen.update(snapshot["seen"])
        self.sent = {(ind_id, dest) for ind_id, dest in snapshot["sent"]}
        for island, data in zip(self.islands, snapshot["islands"]):
            island.restore(data, individuals_by_id)
