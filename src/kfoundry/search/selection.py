"""Parent selection over a list of working individuals: tournament or fitness-proportional, with an
exploration share drawn uniformly."""

from __future__ import annotations

import random
from collections.abc import Sequence

from kfoundry.errors import UsageError
from kfoundry.search.individual import Individual

METHODS = ("tournament", "proportional")


def tournament(population: Sequence[Individual], rng: random.Random, size: int = 3) -> Individual:
    entrants = rng.sample(list(population), min(size, len(population)))
    # the first entrant wins ties, so equal fitness does not favour list order
    return max(entrants, key=lambda ind: ind.fitness or 0.0)


def proportional(population: Sequence[Individual], rng: random.Random) -> Individual:
    # speedups are positive; the floor keeps a 0.0 reachable without dominating
    weights = [max(ind.fitness or 0.0, 1e-6) for ind in population]
    return rng.choices(list(population), weights=weights, k=1)[0]


def select(population: Sequence[Individual], rng: random.Random, method: str = "tournament",
           tournament_size: int = 3, exploration: float = 0.0) -> Individual | None:
    if method not in METHODS:
        raise UsageError(f"unknown selection {method!r}: use one of {', '.join(METHODS)}")
    if not population:
        return None
    if exploration > 0.0 and rng.random() < exploration:
        return rng.choice(list(population))
    if method == "tournament":
        return tournament(population, rng, tournament_size)
    return proportional(population, rng)
