"""A synthetic objective: a source is `value = N` (plus optional noise lines); fitness is N/10,
values below 0 fail. The proposer mutates the parent's number with a seeded RNG of its own; `experts`
turns it (or any `async (parent, others, expert name) -> source`) into experts with the LLM experts'
traits, as a search sees them."""

import random
import re

from kfoundry.experts.base import Proposal, parents_of
from kfoundry.experts.llm_experts import EXPERTS
from kfoundry.search import Individual, Outcome
from kfoundry.types import Diagnosis


def src(value: int, tag: str = "") -> str:
    return f"value = {value}\n{tag}"


def value_of(source: str) -> int:
    return int(re.search(r"value = (-?\d+)", source).group(1))


def evaluate(ind: Individual) -> Outcome:
    value = value_of(ind.source)
    if value < 0:
        return Outcome("wrong_output", None, Diagnosis(status="wrong_output", summary="negative", focus="repair"))
    return Outcome("ok", value / 10, Diagnosis(status="ok", summary="", focus="memory", bound="memory"), cost=0.5)


def ok(ind_id: str, fitness: float, island: int = 0, features: dict | None = None, source: str | None = None):
    ind = Individual(id=ind_id, source=source or src(int(fitness * 1000), ind_id), island=island, status="ok",
                     fitness=fitness, features=features or {})
    return ind


def failing(ind_id: str, island: int = 0) -> Individual:
    return Individual(id=ind_id, source=src(-1, ind_id), island=island, status="compile_error")


class Proposer:
    """Deterministic given its seed and the order of calls (calls start in plan order)."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.calls = []

    async def __call__(self, parent, others, expert):
        self.calls.append((parent.id if parent else None, expert))
        if parent is None:
            return src(self.rng.randint(0, 5), f"y = {self.rng.random()}")
        step = self.rng.randint(-3, 6)
        if parent.status != "ok":
            return src(abs(value_of(parent.source)) + self.rng.randint(0, 3), f"z = {self.rng.random()}")
        if self.rng.random() < 0.2:  # a broken child now and then, for the repair path
            return src(-1 - value_of(parent.source), f"x = {self.rng.random()}")
        return src(value_of(parent.source) + step, f"x = {self.rng.random()}")


class ToyExpert:
    def __init__(self, name, traits, propose):
        self.name, self.traits, self._propose = name, traits, propose

    async def propose(self, step):
        source = await self._propose(step.parent, step.others, self.name)
        return Proposal(source, [p.id for p in parents_of(self.traits, step)], why=step.reason)


def experts(propose, names=tuple(EXPERTS)):
    """Toy experts of these names with the traits the registry's experts of those names have."""
    from kfoundry.experts import registry

    traits = {e.name: e.traits for e in registry.build(registry.Setup(llm=object(), composed=["x = 1\n"]))}
    return [ToyExpert(name, traits[name], propose) for name in names]
