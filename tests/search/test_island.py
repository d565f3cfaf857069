"""kfoundry.search.island: elites and cell champions kept, duplicates refused, repair tries bounded."""

import random

from kfoundry.search import Archipelago, Individual, Island
from tests.search.helpers import failing, ok


def test_bounded_population_keeps_elites():
    island = Island(capacity=4, elites=2)
    for i, fit in enumerate([5.0, 1.0, 4.0, 0.5, 0.7, 3.0, 0.2]):
        assert island.insert(ok(f"i{i}", fit))
    fits = sorted(ind.fitness for ind in island.population)
    assert len(island.population) == 4 and fits == [1.0, 3.0, 4.0, 5.0]
    assert island.best().id == "i0" and island.best_fitness == 5.0


def test_best_of_each_cell_survives_eviction():
    island = Island(capacity=3, elites=1)
    rare = ok("rare", 0.1, features={"backend": "cuda"})
    island.insert(rare)
    for i in range(6):
        island.insert(ok(f"t{i}", 1.0 + i, features={"backend": "triton"}))
    ids = {ind.id for ind in island.population}
    assert "rare" in ids and "t5" in ids and len(ids) == 3


def test_capacity_wins_when_cells_outnumber_it_but_elites_stay():
    island = Island(capacity=2, elites=1)
    for i in range(5):
        island.insert(ok(f"c{i}", float(i + 1), features={"backend": f"b{i}"}))
    assert [ind.id for ind in island.ranked()] == ["c4", "c3"]


def test_identical_code_refused_anywhere_in_the_search():
    arch = Archipelago(k=2)
    first = ok("a", 1.0, island=0, source="x = 1\n")
    assert arch.insert(first)
    assert not arch.insert(ok("b", 2.0, island=1, source="x = 1   # same code\n\n"))
    assert not arch.insert(first)  # the same candidate twice
    assert arch.seen_source("x = 1")
    pending = Individual(id="p", source="x = 3")
    assert not arch.insert(pending)


def test_failures_are_repair_parents_for_at_most_max_tries():
    island = Island(max_repair_tries=2)
    bad = failing("bad")
    assert island.insert(bad) and island.population == []
    rng = random.Random(0)
    picks = 0
    while (parent := island.select_repair(rng)) is not None:
        island.note_repair(parent)
        picks += 1
    assert picks == 2 and bad.repair_tries == 2 and island.repairable() == []
    exhausted = failing("tired")
    exhausted.repair_tries = 2
    island.insert(exhausted)
    assert island.select_repair(rng) is None


def test_failed_pool_is_bounded():
    island = Island(max_failed=3)
    for i in range(5):
        island.insert(failing(f"f{i}"))
    assert [ind.id for ind in island.failed] == ["f2", "f3", "f4"]


def test_stall_counter():
    island = Island()
    island.insert(ok("a", 1.0))
    island.end_generation()
    assert island.stalled == 0
    island.end_generation()
    island.insert(ok("b", 0.5))
    island.end_generation()
    assert island.stalled == 2
    island.insert(ok("c", 2.0))
    island.end_generation()
    assert island.stalled == 0
