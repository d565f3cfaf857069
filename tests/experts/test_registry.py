"""kfoundry.experts.registry: the enabled experts in one order, and a new expert added in one file plus a
registry entry, which a search then uses through its traits alone."""

import asyncio

import pytest

from kfoundry.errors import UsageError
from kfoundry.experts import Router, registry
from kfoundry.experts.base import Proposal, Traits
from kfoundry.search import Archipelago, Outcome, SearchLoop, StopRules
from kfoundry.types import Diagnosis


def test_what_is_enabled_follows_the_setup_in_the_registry_order():
    assert [e.name for e in registry.build(registry.Setup())] == ["tuner"]  # no LLM, no kernel left over
    with_llm = registry.build(registry.Setup(llm=object(), composed=["x = 1\n"]))
    assert [e.name for e in with_llm] == ["initializer", "composer", "repair", "memory", "compute", "fusion",
                                          "algorithm", "crossover", "tuner"]
    assert [e.name for e in registry.build(registry.Setup(llm=object()), ["tuner", "memory"])] == ["memory", "tuner"]
    with pytest.raises(UsageError, match="unknown expert"):
        registry.build(registry.Setup(), ["tuner", "nobody"])


class Doubler:
    """A toy expert: doubles the number in its parent's source."""

    name = "doubler"
    traits = Traits(focus=("memory",))

    async def propose(self, step):
        value = int(step.parent.source.split("=")[1])
        return Proposal(f"value = {2 * value}\n", [step.parent.id], {"doubled": value}, why=step.reason)


class Starter:
    name = "starter"
    traits = Traits(starts=True, min_parents=0, improves=False)

    async def propose(self, step):
        return Proposal("value = 1\n", why=step.reason)


class Queue:
    async def submit(self, ind):
        value = int(ind.source.split("=")[1])
        return Outcome("ok", float(value), Diagnosis(status="ok", summary="", focus="memory"))


def test_a_new_expert_is_one_class_and_one_registry_entry(monkeypatch):
    monkeypatch.setattr(registry, "FACTORIES", dict(registry.FACTORIES))  # the entry goes with the test
    registry.register("starter", lambda setup: Starter())
    registry.register("doubler", lambda setup: Doubler())
    experts = registry.build(registry.Setup(), ["starter", "doubler"])
    loop = SearchLoop(Archipelago(k=1, migrate_every=10), Queue(), Router(experts, seed=0, exploration=0.0),
                      StopRules(max_evals=4), concurrency=1)
    result = asyncio.run(loop.run())
    assert [i.expert for i in loop.individuals.values()] == ["starter", "doubler", "doubler", "doubler"]
    assert result.best.fitness == 8.0 and result.best.record == {"doubled": 4}
