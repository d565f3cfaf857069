"""kfoundry.search.loop: improves a synthetic objective, stops on each rule, one evaluation in flight
per device, proposals concurrent up to the bound, snapshot/restore continues identically."""

import asyncio
import json
import threading
import time

from kfoundry.experts import Router
from kfoundry.search import (
    Archipelago,
    Individual,
    LocalQueue,
    SearchLoop,
    StopRules,
)
from kfoundry.types import Evaluation, TimingReport
from tests.search.helpers import Proposer, evaluate, experts, src


class DirectQueue:
    async def submit(self, individual):
        return evaluate(individual)


def _loop(stop, *, k=4, proposer=None, queue=None, events=None, seed=0, **kw):
    arch = Archipelago(k=k, migrate_every=2, capacity=6, elites=2, max_repair_tries=2)
    return SearchLoop(arch, queue or DirectQueue(), Router(experts(proposer or Proposer(seed)), seed=seed), stop,
                      seed=seed, on_event=events.append if events is not None else None, **kw)


def _trace(loop):
    return [(i.id, i.source, i.status, i.fitness, i.expert, i.parent_ids, i.island)
            for i in loop.individuals.values()]


def test_improves_the_synthetic_objective_and_reports_the_best():
    events = []
    proposer = Proposer(0)
    loop = _loop(StopRules(max_evals=120), proposer=proposer, events=events)
    result = asyncio.run(loop.run())
    inits = [i.fitness for i in loop.individuals.values() if i.expert == "initializer" and i.ok]
    assert result.best.fitness >= max(inits) + 2.0
    assert result.best.fitness == max(i.fitness for i in loop.individuals.values() if i.ok)
    assert result.state.evals == 120 and "evaluation budget" in result.reason
    kinds = {e["event"] for e in events}
    assert {"proposed", "evaluated", "best", "migrated", "reseeded", "generation", "stop"} <= kinds
    # islands far behind were reseeded from the best of that moment, which never left
    reseeds = [island for e in events if e["event"] == "reseeded" for island in e["islands"]]
    assert reseeds and all(best not in gone and gone for _, best, gone in reseeds)
    experts = {i.expert for i in loop.individuals.values()}
    assert {"initializer", "repair"} <= experts and experts & {"memory", "compute", "fusion", "algorithm"}
    # each failing parent was handed to the repair expert at most max_repair_tries times
    repairs = [pid for pid, expert in proposer.calls if expert == "repair"]
    assert repairs and max(repairs.count(pid) for pid in set(repairs)) <= 2
    # no two evaluated candidates share normalized code
    assert len({i.source_hash for i in loop.individuals.values()}) == len(loop.individuals)
    assert json.dumps(loop.state())


def test_stops_on_each_rule():
    r = asyncio.run(_loop(StopRules(max_evals=7)).run())
    assert r.state.evals == 7 and "evaluation budget" in r.reason
    r = asyncio.run(_loop(StopRules(max_cost=3.0)).run())
    assert r.state.cost >= 3.0 and "cost" in r.reason
    r = asyncio.run(_loop(StopRules(target_speedup=1.5, max_evals=500)).run())
    assert r.best.fitness >= 1.5 and "target" in r.reason
    r = asyncio.run(_loop(StopRules(max_generations=3)).run())
    assert r.state.generation == 3 and "generation limit" in r.reason
    ticks = iter(range(10**6))
    r = asyncio.run(_loop(StopRules(max_time_s=5), clock=lambda: float(next(ticks))).run())
    assert r.state.elapsed_s >= 5 and "time" in r.reason

    async def nothing(parent, others, expert):
        return None
    r = asyncio.run(_loop(StopRules(stagnation_generations=4), proposer=nothing).run())
    # generations that evaluate nothing do not count as stalled: their own rule ends the search
    assert r.best is None and r.state.generation == 6 and "nothing new for 6" in r.reason


def test_cost_fn_counts_and_faults_do_not_end_the_run():
    events = []

    async def flaky(parent, others, expert):
        if len(events) % 3 == 0:
            raise RuntimeError("provider down")
        return src(len(events), f"n = {len(events)}")

    class BrokenQueue:
        async def submit(self, individual):
            if "value = 4" in individual.source:
                raise OSError("worker died")
            return evaluate(individual)

    loop = _loop(StopRules(max_cost=100.0, max_generations=6), proposer=flaky, queue=BrokenQueue(),
                 events=events, cost_fn=lambda: 40.0)
    r = asyncio.run(loop.run())
    assert any(e["event"] == "propose_error" for e in events)
    assert r.state.cost >= 40.0 and r.state.generation <= 6


def test_the_search_takes_outcomes_only_and_anything_else_is_a_crash():
    """kfoundry.optimize.outcome makes the Outcome of an Evaluation; a queue that returns the Evaluation
    itself gives crash verdicts, reported, and the run goes on."""
    def as_evaluation(ind):
        out = evaluate(ind)
        return Evaluation(status=out.status, message="", timing=TimingReport(speedup_eager=out.fitness),
                          diagnosis=out.diagnosis)
    events = []
    with LocalQueue(as_evaluation) as queue:
        r = asyncio.run(_loop(StopRules(max_evals=6), queue=queue, events=events).run())
    assert r.best is None and {i.status for i in r.individuals.values()} == {"crash"}
    assert any(e["event"] == "evaluate_error" and "Outcome" in e["error"] for e in events)
    with LocalQueue(evaluate) as queue:
        r = asyncio.run(_loop(StopRules(max_evals=12), queue=queue).run())
    assert r.best.fitness == max(i.fitness for i in r.individuals.values() if i.ok)


def test_one_evaluation_in_flight_per_device_while_proposals_run_concurrently():
    lock = threading.Lock()
    evals = {"now": 0, "max": 0}
    proposals = {"now": 0, "max": 0}

    def slow_evaluate(ind):
        with lock:
            evals["now"] += 1
            evals["max"] = max(evals["max"], evals["now"])
        time.sleep(0.005)
        with lock:
            evals["now"] -= 1
        return evaluate(ind)

    inner = Proposer(5)

    async def slow_propose(parent, others, expert):
        proposals["now"] += 1
        proposals["max"] = max(proposals["max"], proposals["now"])
        try:
            await asyncio.sleep(0.01)
            return await inner(parent, others, expert)
        finally:
            proposals["now"] -= 1

    with LocalQueue(slow_evaluate, workers=1) as queue:
        r = asyncio.run(_loop(StopRules(max_generations=3), k=6, proposer=slow_propose, queue=queue,
                              concurrency=3).run())
    assert r.state.evals > 6
    assert evals["max"] == 1
    assert proposals["max"] == 3


def test_snapshot_restore_continues_identically():
    straight = _loop(StopRules(max_generations=12), seed=3)
    asyncio.run(straight.run())

    original = Proposer(3)
    first = _loop(StopRules(max_generations=5), seed=3, proposer=original)
    asyncio.run(first.run())
    snapshot = json.loads(json.dumps(first.state()))
    # the run store keeps individuals as JSON too
    stored = {i.id: Individual.from_dict(json.loads(json.dumps(i.to_dict()))) for i in first.individuals.values()}
    proposer = Proposer(999)
    proposer.rng.setstate(original.rng.getstate())  # the synthetic proposer's own state
    resumed = _loop(StopRules(max_generations=12), seed=12345, proposer=proposer)  # seed comes from the snapshot
    resumed.restore(snapshot, stored)
    asyncio.run(resumed.run())

    assert _trace(resumed) == _trace(straight)
    a, b = straight.state(), resumed.state()
    a["search"].pop("elapsed_s"), b["search"].pop("elapsed_s")
    assert a == b


def test_seed_evaluates_the_first_population_at_once_and_records_it_in_order():
    """The first population fills every worker of the queue (on two GPUs, two at once), and is
    recorded in the order given, whatever order the evaluations finish in."""

    class SlowQueue:
        def __init__(self):
            self.running = self.most = 0

        async def submit(self, individual):
            self.running += 1
            self.most = max(self.most, self.running)
            await asyncio.sleep(0.05 if "value = 1" in individual.source else 0.01)  # the first finishes last
            self.running -= 1
            return evaluate(individual)

    queue, events = SlowQueue(), []
    loop = _loop(StopRules(max_evals=10), queue=queue, events=events)
    first = [Individual(id=f"s{i}", source=src(i + 1), island=i % 4) for i in range(4)]
    asyncio.run(loop.seed(first))
    assert queue.most == 4
    assert [e["id"] for e in events if e["event"] == "evaluated"] == ["s0", "s1", "s2", "s3"]
    assert loop.search.evals == 4


def test_an_environment_fault_stops_the_search_and_no_child_is_recorded():
    """A fault of the machine's, not the candidate's: the search stops at once, the child that met it is
    not recorded (no verdict, no evaluation counted), and the children in flight are not waited for."""
    import pytest

    from kfoundry.errors import EnvironmentFault

    started = []

    class FailingMachine:
        async def submit(self, individual):
            started.append(individual.id)
            if len(started) == 1:
                raise EnvironmentFault("CUDA could not start", "check the driver")
            await asyncio.sleep(30)  # the others would take long: the loop must not wait for them
            return evaluate(individual)

    events = []
    loop = _loop(StopRules(max_evals=20), queue=FailingMachine(), events=events, concurrency=3)
    begun = time.monotonic()
    with pytest.raises(EnvironmentFault):
        asyncio.run(loop.run())
    assert time.monotonic() - begun < 10
    assert loop.individuals == {} and loop.search.evals == 0
    assert [e for e in events if e["event"] == "evaluated"] == []
    assert any(e["event"] == "environment_fault" and e["cause"] == "CUDA could not start" for e in events)


class _Fallback:
    """An expert the loop asks when the chosen one offers nothing: a fixed list of sources, then its coverage."""

    def __init__(self, sources):
        from kfoundry.experts.base import Traits

        self.name, self.traits, self.sources, self.asked = "recompose", Traits(fallback=True), list(sources), 0

    async def propose(self, step):
        from kfoundry.experts.base import Proposal

        self.asked += 1
        source = self.sources.pop(0) if self.sources else None
        return Proposal(source, [step.parent.id] if source else [], {"move": {"kind": "explore"}} if source else {},
                        why=step.reason)

    def coverage(self):
        return f"the space is spent: {10 - len(self.sources)} of 10 tried"


def test_an_expert_with_nothing_new_hands_the_step_to_the_fallback_until_its_space_is_spent():
    async def only_first(parent, others, expert):  # the improvers offer nothing once there is a parent
        return src(3, "first") if parent is None else None
    fallback = _Fallback([src(10 + i, f"f{i}") for i in range(10)])
    arch = Archipelago(k=2, migrate_every=2, capacity=16, elites=2)
    router = Router(experts(only_first, names=("initializer", "compute")) + [fallback], seed=0)
    events = []
    result = asyncio.run(SearchLoop(arch, DirectQueue(), router, StopRules(max_evals=40), seed=0,
                                    on_event=events.append).run())
    by_fallback = [i for i in result.individuals.values() if i.expert == "recompose"]
    assert len(by_fallback) == 10  # every source it had was evaluated, on steps another expert was chosen for
    assert all(i.parent_ids and i.record["move"]["kind"] == "explore" for i in by_fallback)
    assert any("offered nothing new: recompose instead" in e.get("reason", "") for e in events
               if e["event"] == "proposed")
    # spent: the search stops for lack of proposals and says how much of the space was tried
    assert "nothing new" in result.reason and "the space is spent: 10 of 10 tried" in result.reason
    assert result.state.evals < 40


def test_a_spent_fallback_hands_the_step_to_another_expert_that_costs_no_llm_call():
    """The genome space spent, the tuner (which has more to try) still spends the budget: the search does not
    stop for lack of proposals while any expert without an LLM has one."""
    counter = iter(range(10, 10**6))

    async def tuner(parent, others, expert):
        return src(3, "first") if parent is None else (src(next(counter), "t") if expert == "tuner" else None)
    spent = _Fallback([])
    arch = Archipelago(k=2, migrate_every=2, capacity=16, elites=2)
    router = Router(experts(tuner, names=("initializer", "compute", "tuner")) + [spent], seed=0)
    result = asyncio.run(SearchLoop(arch, DirectQueue(), router, StopRules(max_evals=30), seed=0).run())
    assert result.state.evals == 30 and "evaluation budget" in result.reason
    assert spent.asked > 0 and {i.expert for i in result.individuals.values()} >= {"tuner"}
