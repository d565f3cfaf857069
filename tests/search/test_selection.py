"""kfoundry.search.selection: tournament vs fitness-proportional statistics, seeded."""

import random
from collections import Counter

import pytest

from kfoundry.errors import UsageError
from kfoundry.search import Island, proportional, select, tournament
from tests.search.helpers import ok

POP = [ok(f"p{f}", float(f)) for f in (1, 2, 3, 4)]  # total fitness 10
N = 20000


def _freq(pick):
    counts = Counter(pick().id for _ in range(N))
    return {k: v / N for k, v in counts.items()}


def test_proportional_matches_fitness_shares():
    rng = random.Random(1)
    freq = _freq(lambda: proportional(POP, rng))
    for ind in POP:
        assert freq[ind.id] == pytest.approx(ind.fitness / 10, abs=0.015)


def test_tournament_matches_order_statistics():
    # size 2 without replacement over 4 ranked members: P(rank r wins) = (r - 1) / C(4, 2)
    rng = random.Random(2)
    freq = _freq(lambda: tournament(POP, rng, size=2))
    for rank, ind in enumerate(POP, start=1):
        assert freq.get(ind.id, 0.0) == pytest.approx((rank - 1) / 6, abs=0.015)


def test_bigger_tournaments_press_harder():
    rng = random.Random(3)
    assert _freq(lambda: tournament(POP, rng, size=3))["p4"] == pytest.approx(0.75, abs=0.015)
    assert tournament(POP, rng, size=10).id == "p4"


def test_exploration_share_is_uniform():
    rng = random.Random(4)
    freq = _freq(lambda: select(POP, rng, "tournament", tournament_size=4, exploration=0.4))
    # a size-4 tournament always picks p4; the 40% uniform share spreads 10% to each member
    assert freq["p1"] == pytest.approx(0.1, abs=0.015)
    assert freq["p4"] == pytest.approx(0.7, abs=0.015)


def test_seeded_selection_repeats_and_empty_and_unknown():
    island = Island(selection="proportional", exploration=0.2)
    for ind in POP:
        island.insert(ind)
    a = [island.select_parent(random.Random(7)).id for _ in range(5)]
    b = [island.select_parent(random.Random(7)).id for _ in range(5)]
    assert a == b
    assert select([], random.Random(0)) is None
    with pytest.raises(UsageError):
        select(POP, random.Random(0), "roulette")
