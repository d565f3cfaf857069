"""kfoundry.search.archipelago: ring and all-to-all migration, never re-sending a migrant."""

import pytest

from kfoundry.errors import UsageError
from kfoundry.search import Archipelago
from tests.search.helpers import failing, ok


def _filled(k=4, topology="ring"):
    arch = Archipelago(k=k, topology=topology)
    for i in range(k):
        arch.insert(ok(f"best{i}", 10.0 + i, island=i))
        arch.insert(ok(f"weak{i}", 1.0 + i, island=i))
    return arch


def test_ring_moves_each_best_to_the_next_island_one_hop():
    arch = _filled()
    moved = arch.migrate()
    assert sorted(moved) == [("best0", 0, 1), ("best1", 1, 2), ("best2", 2, 3), ("best3", 3, 0)]
    assert {ind.id for ind in arch.islands[1].population} == {"best0", "best1", "weak1"}
    assert "best0" in {ind.id for ind in arch.islands[0].population}  # the source keeps its copy


def test_never_resends_a_migrant_to_the_same_island():
    arch = _filled()
    arch.migrate()
    second = arch.migrate()
    # island 0 now holds best3 (13.0) as its best; it already came from island 3 and goes on to 1;
    # island 3's best is still best3, already sent to 0: nothing moves there again
    assert ("best3", 3, 0) not in second
    assert len(second) == len({(m[0], m[2]) for m in second})
    third = arch.migrate()
    sent_pairs = [(m[0], m[2]) for m in arch.migrate() + third + second]
    assert len(sent_pairs) == len(set(sent_pairs))


def test_an_evicted_migrant_is_not_sent_again():
    arch = Archipelago(k=2, capacity=1, elites=1)
    arch.insert(ok("a", 1.0, island=0))
    arch.insert(ok("b", 5.0, island=1))
    assert arch.migrate() == [("a", 0, 1), ("b", 1, 0)]
    # a was evicted from island 1 by b; b replaced a on island 0
    assert [i.id for i in arch.islands[1].population] == ["b"]
    assert arch.migrate() == []


def test_all_to_all_sends_to_every_other_island():
    arch = _filled(k=3, topology="all-to-all")
    moved = arch.migrate()
    assert sorted((m[1], m[2]) for m in moved) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert arch.destinations(0) == [1, 2]


def test_single_island_and_bad_topology():
    assert Archipelago(k=1).migrate() == []
    with pytest.raises(UsageError):
        Archipelago(topology="star")


def test_state_roundtrip_keeps_sent_bookkeeping():
    import json
    arch = _filled()
    arch.migrate()
    snap = json.loads(json.dumps(arch.state()))
    individuals = {ind.id: ind for island in arch.islands for ind in island.population}
    again = Archipelago(k=4)
    again.restore(snap, individuals)
    assert again.sent == arch.sent and again.seen == arch.seen
    assert [[i.id for i in isl.population] for isl in again.islands] == \
        [[i.id for i in isl.population] for isl in arch.islands]
    assert sorted(again.migrate()) == sorted(arch.migrate())



def test_a_stalled_island_far_behind_is_reseeded_from_the_search_s_best():
    arch = Archipelago(k=3)
    for ind in (ok("fast", 3.0, island=0), ok("fast_child", 2.9, island=0),
                ok("accurate", 1.6, island=1), ok("accurate_child", 1.7, island=1),  # both under 0.6 x 3.0
                ok("close", 1.9, island=2), ok("weak", 1.0, island=2)):  # its best above the line
        arch.insert(ind)
    for island in arch.islands:
        island.end_generation()
    assert arch.reseed_lagging() == []  # every island improved in the generation just ended
    for island in arch.islands:
        island.end_generation()
    assert arch.reseed_lagging() == [(1, "fast", ["accurate", "accurate_child"])]
    assert [ind.id for ind in arch.islands[1].population] == ["fast"]
    assert arch.islands[1].best_fitness == 3.0 and arch.islands[1].best().id == "fast"
    assert {ind.id for ind in arch.islands[2].population} == {"close", "weak"}  # not lagging: untouched
    assert {ind.id for ind in arch.islands[0].population} == {"fast", "fast_child"}
    for island in arch.islands:
        island.end_generation()
    assert arch.reseed_lagging() == []  # nobody lags now


def test_after_the_first_population_an_island_far_behind_is_reseeded_at_once():
    arch = Archipelago(k=3)
    for ind in (ok("fp16", 1.6, island=0), ok("tf32x3", 0.85, island=1),  # 0.53 x the best: under the line
                ok("close", 1.0, island=2)):  # 0.63 x: above it
        arch.insert(ind)
    for island in arch.islands:
        island.end_generation()  # each island's first best: none has stalled
    assert arch.reseed_lagging() == []
    assert arch.reseed_lagging(first_population=True) == [(1, "fp16", ["tf32x3"])]
    assert {ind.id for ind in arch.islands[2].population} == {"close"}
    # an island with no correct member is left as it is (its failing start may be repaired)
    lone = Archipelago(k=2)
    lone.insert(ok("fast", 2.0, island=0))
    lone.insert(failing("broken", island=1))
    for island in lone.islands:
        island.end_generation()
    assert lone.reseed_lagging(first_population=True) == []
    assert lone.islands[1].best() is None


def test_one_island_and_an_empty_search_are_never_reseeded():
    assert Archipelago(k=1).reseed_lagging() == []
    assert Archipelago(k=2).reseed_lagging() == []
    single = Archipelago(k=1)
    single.insert(ok("only", 1.0, island=0))
    single.islands[0].end_generation()
    single.islands[0].end_generation()
    assert single.reseed_lagging() == []
