"""The asynchronous search loop: an island picks a parent, the router names an expert from the
parent's diagnosis, the expert proposes (kfoundry.experts.base: only its traits are read), duplicates are dropped, the evaluation goes through a queue
and the child is inserted. It is a pipeline, not lockstep generations: up to `concurrency` children
are in flight (proposed or being evaluated) at once, and each time one is judged another is planned
from the populations as they are then, so the evaluators never wait for a generation's slowest
child. A generation is a count: it ends each time as many children as there are island slots
(islands x children per island) have come back; islands migrate every M generations; rules stop it
(no new child is planned once one applies, and the children in flight are judged and kept).

Resumable: `state()` is a JSON-serializable snapshot and `restore()` rebuilds the loop from it, so
a restored loop with the same experts and evaluator continues exactly as the original would have."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kfoundry.errors import EnvironmentFault
from kfoundry.random_state import random_state_from_json, random_state_to_json
from kfoundry.search.archipelago import Archipelago
from kfoundry.search.features import features
from kfoundry.search.individual import Individual
from kfoundry.search.island import Island
from kfoundry.search.near_duplicates import NearDuplicateFilter
from kfoundry.search.queue import EvaluationQueue, Outcome
from kfoundry.search.stop import OUT_OF_PROPOSALS, SearchState, StopRules
from kfoundry.experts.base import Expert, Proposal, Step
from kfoundry.types import Diagnosis

# gives a proposed child its lasting id (the run store's) before it is evaluated
Identify = Callable[[Individual], str]
# a proposal that became no candidate (nothing offered, a duplicate): its record may still be kept
Dropped = Callable[[str, Proposal], None]
SNAPSHOT_VERSION = 2


@dataclass
class Plan:
    id: str
    island: Island
    kind: str  # init, improve or repair
    parent: Individual | None
    others: list[Individual]
    expert: Expert
    reason: str


@dataclass
class SearchResult:
    best: Individual | None  # the best verified individual of the whole search
    reason: str  # why it stopped
    state: SearchState
    individuals: dict[str, Individual] = field(default_factory=dict)


class SearchLoop:
    """`router`: a kfoundry.experts.Router over the enabled experts (it names each step's expert)."""

    def __init__(self, archipelago: Archipelago, evaluate_queue: EvaluationQueue, router: Any,
                 stop_rules: StopRules, *, concurrency: int = 4, on_event: Callable[[dict], None] | None = None,
                 seed: int | None = 0, repair_share: float = 0.25, children_per_island: int = 1,
                 inspirations: int = 2, cost_fn: Callable[[], float] | None = None,
                 clock: Callable[[], float] = time.monotonic, identify: Identify | None = None,
                 dropped: Dropped | None = None, near_duplicates: NearDuplicateFilter | None = None):
        self.archipelago = archipelago
        self.queue = evaluate_queue
        self.router = router
        self.stop_rules = stop_rules
        self.concurrency = concurrency
        self.on_event = on_event
        self.repair_share = repair_share  # chance an island with working members repairs a failure instead
        self.children_per_island = children_per_island
        self.inspirations = inspirations
        self.cost_fn = cost_fn  # cumulative cost spent outside evaluations (LLM tokens), if any
        self.clock = clock
        self.identify = identify
        self.dropped = dropped
        self.near_duplicates = near_duplicates  # rejects code too similar to a candidate already seen
        self.individuals: dict[str, Individual] = {}  # every evaluated candidate, by id
        self.search = SearchState()
        self.best_id: str | None = None
        self._eval_cost = 0.0
        self._next_id = 0
        self._rng = random.Random(seed)
        self._elapsed_base = 0.0
        self._started: float | None = None
        self._improved = False  # the overall best improved during the current generation
        self._turn = 0  # the island that plans the next child

    # -- helpers ------------------------------------------------------------------------------

    def _emit(self, event: str, **data: Any) -> None:
        if self.on_event is not None:
            self.on_event({"event": event, "generation": self.search.generation, **data})

    def best(self) -> Individual | None:
        return self.individuals.get(self.best_id) if self.best_id else None

    def _refresh(self) -> SearchState:
        if self._started is not None:
            self.search.elapsed_s = self._elapsed_base + self.clock() - self._started
        self.search.cost = self._eval_cost + (self.cost_fn() if self.cost_fn else 0.0)
        best = self.best()
        self.search.best_fitness = best.fitness if best else None
        self.search.best_roofline = max((i.roofline for i in self.individuals.values() if i.ok and i.roofline),
                                        default=None)
        return self.search

    # -- planning -----------------------------------------------------------------------------

    def _borrow(self, island: Island) -> bool:
        """An island with nothing to work on, in a search without an expert that writes a new first
        kernel whenever asked, takes the best working candidate of the archipelago (True when it got one)."""
        if island.population or self.router.writes_new_first_kernels():
            return False  # an LLM initializer writes a new first kernel instead
        best = self.archipelago.best()
        if best is None or not island.receive(best):
            return False
        self._emit("borrowed", id=best.id, island=island.index)
        return True

    def _plan(self, island: Island) -> Plan | None:
        repairable = island.repairable()
        if not repairable:
            self._borrow(island)
        if not island.population and not repairable and not self.router.starts():
            return None  # nothing to start from and nobody to write a first kernel
        if island.population and (not repairable or self._rng.random() >= self.repair_share):
            kind, parent = "improve", island.select_parent(self._rng)
        elif repairable:
            kind, parent = "repair", island.select_repair(self._rng)
            island.note_repair(parent)  # counted when chosen, so one failure never exceeds its tries
        else:
            kind, parent = "init", None
        others = [] if parent is None else \
            [m for m in island.elite_members() if m.id != parent.id][:self.inspirations]
        diagnosis = parent.diagnosis if parent is not None else None
        if parent is not None and parent.failed and diagnosis is None:
            diagnosis = Diagnosis(status=parent.status, summary="")
        expert, reason = self.router.choose_with_reason(diagnosis, has_parent=parent is not None,
                                                        parents_available=1 + len(others),
                                                        stalled_for=island.stalled)
        plan = Plan(f"c{self._next_id}", island, kind, parent, others, expert, reason)
        self._next_id += 1
        return plan

    # -- one child ----------------------------------------------------------------------------

    def _drop(self, name: str, proposal: Proposal) -> None:
        if self.dropped is not None:
            self.dropped(name, proposal)

    async def _child(self, plan: Plan, claimed: set[str]) -> Individual | None:
        ind = await self._propose(plan, plan.expert, claimed)
        if ind is None and plan.kind == "improve":
            # nothing new from the chosen expert: the others that cost no LLM call take the step in turn, the
            # fallback first (an untried genome while its space lasts), so the budget is spent while any has one
            for other in self._fallbacks(plan):
                ind = await self._propose(plan, other, claimed, f"{plan.expert.name} offered nothing new")
                if ind is not None:
                    break
        if ind is None:
            return None
        return await self._evaluate(ind)

    def _fallbacks(self, plan: Plan) -> list[Expert]:
        others = [e for e in getattr(self.router, "experts", []) if e is not plan.expert and e.traits.improves
                  and not e.traits.needs_llm and e.traits.min_parents <= 1 + len(plan.others)]
        return sorted(others, key=lambda e: not e.traits.fallback)

    async def _propose(self, plan: Plan, expert: Expert, claimed: set[str], instead: str = "") -> Individual | None:
        """The expert's child for the plan, identified and claimed; None when it offers nothing new."""
        name = expert.name
        reason = f"{instead}: {name} instead" if instead else plan.reason
        try:
            proposal = await expert.propose(Step(plan.parent, plan.others, reason, island=plan.island.index,
                                                 islands=len(self.archipelago.islands)))
        except Exception as exc:  # noqa: BLE001 -- one expert's fault never ends the run
            self._emit("propose_error", id=plan.id, expert=name, error=f"{type(exc).__name__}: {exc}")
            return None
        if not proposal.source:
            self._emit("no_proposal", id=plan.id, expert=name)
            self.router.record(name, False)  # an expert with nothing to offer is tried less
            self._drop(name, proposal)
            return None
        source = proposal.source
        ind = Individual(id=plan.id, source=source, parent_ids=list(proposal.parent_ids), expert=name,
                         island=plan.island.index, generation=self.search.generation, record=proposal.record)
        # checked and claimed with no await in between, so two identical proposals never both run
        if ind.source_hash in self.archipelago.seen or ind.source_hash in claimed:
            self._emit("duplicate", id=ind.id, expert=name)
            self._drop(name, proposal)
            return None
        claimed.add(ind.source_hash)
        near = self.near_duplicates
        if near is not None and not plan.expert.traits.small_edits:
            # synchronous like the check above, so two near-identical siblings never both run
            is_near, similar_to, score = near.is_near(source)
            if is_near:
                self._emit("near_duplicate", id=ind.id, expert=name, similar_to=similar_to,
                           score=round(score, 4))
                self._drop(name, proposal)
                return None
        if self.identify is not None:
            ind.id = self.identify(ind)
        if near is not None:
            near.add(ind.id, source)
        self._emit("proposed", id=ind.id, island=ind.island, expert=name, reason=reason,
                   parent=plan.parent.id if plan.parent else None)
        return ind

    async def _evaluate(self, ind: Individual) -> Individual:
        try:
            outcome = await self.queue.submit(ind)
            if not isinstance(outcome, Outcome):
                raise TypeError(f"an evaluation must return an Outcome, not {type(outcome).__name__}")
        except EnvironmentFault:
            raise  # the machine's fault, not the candidate's: the search stops, the child is not recorded
        except Exception as exc:  # noqa: BLE001 -- a worker fault is a crash verdict
            self._emit("evaluate_error", id=ind.id, error=f"{type(exc).__name__}: {exc}")
            outcome = Outcome("crash")
        ind.status, ind.fitness, ind.diagnosis = outcome.status, outcome.fitness, outcome.diagnosis
        ind.roofline, ind.parent_info = outcome.roofline, outcome.parent_info
        if ind.status != "ok":
            ind.fitness = None
        ind.features = features(ind.source, ind.diagnosis)
        self._eval_cost += outcome.cost
        return ind

    def _record(self, plan: Plan | None, ind: Individual) -> None:
        self.individuals[ind.id] = ind
        if self.near_duplicates is not None:
            self.near_duplicates.add(ind.id, ind.source)
        self.search.evals += 1
        inserted = self.archipelago.insert(ind)
        parent = plan.parent if plan is not None else \
            (self.individuals.get(ind.parent_ids[0]) if ind.parent_ids else None)
        improved_parent = ind.ok and (parent is None or not parent.ok or ind.fitness > parent.fitness)
        if ind.expert in self.router.stats():
            self.router.record(ind.expert, improved_parent, ind, parent)
        self._emit("evaluated", id=ind.id, island=ind.island, expert=ind.expert, status=ind.status,
                   fitness=ind.fitness, inserted=inserted)
        best = self.best()
        if ind.ok and (best is None or ind.fitness > best.fitness):
            self.best_id = ind.id
            self._improved = True
            self._emit("best", id=ind.id, fitness=ind.fitness)

    # -- generations --------------------------------------------------------------------------

    def _next_plan(self) -> Plan | None:
        """A child for the next island in turn that has something to work on."""
        islands = self.archipelago.islands
        for _ in range(len(islands)):
            island = islands[self._turn % len(islands)]
            self._turn += 1
            plan = self._plan(island)
            if plan is not None:
                return plan
        return None

    async def _pipeline(self) -> str:
        """Keep `concurrency` children in flight until a stop rule applies; returns the reason."""
        generation_size = max(1, len(self.archipelago.islands) * self.children_per_island)
        flying: dict[asyncio.Task, Plan] = {}
        claimed: set[str] = set()
        came_back = recorded = 0
        reason: str | None = None
        self._improved = False
        while True:
            while reason is None and len(flying) < self.concurrency:
                reason = self.stop_rules.should_stop(self._refresh())
                left = self.stop_rules.evals_left(self.search)
                if reason is not None or (left is not None and left <= len(flying)):
                    break
                plan = self._next_plan()
                if plan is None:
                    if not flying:
                        reason = ("nothing to evolve: no working candidate, and no expert here writes a first "
                                  "kernel (an LLM's initializer)")
                    break
                flying[asyncio.ensure_future(self._child(plan, claimed))] = plan
            if not flying:
                return self._with_coverage(reason or self.stop_rules.should_stop(self._refresh()) or "budget spent")
            done, _ = await asyncio.wait(list(flying), return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: int(flying[t].id[1:]) if flying[t].id[1:].isdigit() else 0):
                plan = flying.pop(task)
                try:
                    ind = task.result()
                except EnvironmentFault as fault:
                    for other in flying:  # their evaluations fail the same way: none is waited for
                        other.cancel()
                    self._emit("environment_fault", id=plan.id, cause=fault.cause, fix=fault.fix)
                    raise
                came_back += 1
                if ind is not None:
                    self._record(plan, ind)
                    recorded += 1
                if came_back >= generation_size:
                    self._end_generation(evaluated=recorded)
                    self._improved = False
                    came_back = recorded = 0

    def _with_coverage(self, reason: str) -> str:
        """A stop for lack of proposals says how much of the fallback experts' spaces was tried."""
        if not reason.startswith(OUT_OF_PROPOSALS):
            return reason
        experts = getattr(self.router, "experts", [])
        return "; ".join([reason, *(e.coverage() for e in experts if e.traits.fallback and hasattr(e, "coverage"))])

    async def seed(self, children: list[Individual]) -> None:
        """A generation of given candidates (the user's seeds, composed kernels, a stopped run's
        last children): each is identified, evaluated unless it already has a verdict, and
        inserted on its island. Identical code is taken once."""
        self._improved = False
        fresh: list[Individual] = []
        for ind in children:
            if ind.source_hash in self.archipelago.seen or any(f.source_hash == ind.source_hash for f in fresh):
                self._emit("duplicate", id=ind.id, expert=ind.expert)
                continue
            fresh.append(ind)
        left = self.stop_rules.evals_left(self.search)
        if left is not None:  # children with a verdict already count; new evaluations fill what is left
            done = [ind for ind in fresh if ind.status != "pending"]
            allowed = {id(ind) for ind in [ind for ind in fresh if ind.status == "pending"][:max(left - len(done), 0)]}
            fresh = [ind for ind in fresh if ind.status != "pending" or id(ind) in allowed]
        for ind in fresh:  # identified only once within the budget: nothing is stored that will not be evaluated
            if self.identify is not None:
                ind.id = self.identify(ind)
        # evaluated at once (the queue runs as many as it has workers), recorded in the given order
        await asyncio.gather(*(self._evaluate(ind) for ind in fresh if ind.status == "pending"))
        for ind in fresh:
            self._record(None, ind)
        self._end_generation(evaluated=len(fresh))

    def _end_generation(self, evaluated: int = 1) -> None:
        for island in self.archipelago.islands:
            island.end_generation()
        # a generation that evaluated nothing (all duplicates) neither improves nor stalls the search
        if evaluated:
            self.search.stalled_generations = 0 if self._improved else self.search.stalled_generations + 1
        self.search.empty_generations = 0 if evaluated else self.search.empty_generations + 1
        self.search.generation += 1
        reseeded = self.archipelago.reseed_lagging(first_population=self.search.generation == 1)
        if reseeded:
            self._emit("reseeded", islands=[[index, best, gone] for index, best, gone in reseeded])
        if self.search.generation % self.archipelago.migrate_every == 0:
            moved = self.archipelago.migrate()
            self._emit("migrated", moves=[list(m) for m in moved])
        self._emit("generation", evals=self.search.evals, best=self.best_id,
                   best_fitness=self.best().fitness if self.best() else None)

    def start_clock(self) -> None:
        """Count elapsed time from now (the first population's evaluations count too); run() starts it if
        nobody did."""
        if self._started is None:
            self._started = self.clock()
            self._elapsed_base = self.search.elapsed_s

    async def run(self) -> SearchResult:
        self.start_clock()
        try:
            reason = await self._pipeline()
        finally:
            self._refresh()
            self._elapsed_base, self._started = self.search.elapsed_s, None
        self._emit("stop", reason=reason, best=self.best_id)
        return SearchResult(self.best(), reason, self.search, self.individuals)

    def elapsed_s(self) -> float:
        """The search's time so far, this session's running span included; it only reads the loop's state,
        so an evaluation's thread may ask too."""
        started = self._started
        return self.search.elapsed_s if started is None else self._elapsed_base + self.clock() - started

    def take_in_elapsed(self, seconds: float) -> None:
        """Time an earlier session spent after its last snapshot (kept as it passed): counted from now on.
        Before the clock starts."""
        if self._started is None and seconds > self.search.elapsed_s:
            self.search.elapsed_s = seconds
            self._elapsed_base = seconds

    # -- snapshot -----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """JSON-serializable: populations as ids + fitness, migrants sent, counters, random states."""
        self._refresh()
        return {"version": SNAPSHOT_VERSION, "search": asdict(self.search), "best_id": self.best_id,
                "recorded": list(self.individuals),  # in the order recorded
                "eval_cost": self._eval_cost, "next_id": self._next_id, "turn": self._turn,
                "archipelago": self.archipelago.state(), "rng": random_state_to_json(self._rng),
                "router": self.router.state()}

    def restore(self, snapshot: dict[str, Any], individuals_by_id: dict[str, Individual]) -> SearchLoop:
        """Rebuild this loop (built with the same archipelago settings) from `state()`'s snapshot and
        the individuals the run store kept."""
        if snapshot.get("version") not in (1, SNAPSHOT_VERSION):
            raise ValueError(f"unsupported search snapshot version {snapshot.get('version')!r}")
        recorded = snapshot.get("recorded")
        self.individuals = {i: individuals_by_id[i] for i in recorded if i in individuals_by_id} \
            if recorded is not None else dict(individuals_by_id)
        self.search = SearchState(**snapshot["search"])
        self._elapsed_base, self._started = self.search.elapsed_s, None
        self.best_id = snapshot["best_id"]
        self._eval_cost = snapshot["eval_cost"]
        self._next_id = snapshot["next_id"]
        self._turn = snapshot.get("turn", 0)
        self.archipelago.restore(snapshot["archipelago"], self.individuals)
        if self.near_duplicates is not None:
            self.near_duplicates.rebuild((i.id, i.source) for i in self.individuals.values())
        self._rng.setstate(random_state_from_json(snapshot["rng"]))
        self.router.restore(snapshot.get("router") or {})
        return self
