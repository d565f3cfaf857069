"""LLM-free experts over the composer's genomes (kfoundry.experts.composer.genome): `recompose` moves one gene
of a parent's genome the way its diagnosis points (genome_moves) and composes again; `recombine` takes genes
from two parents, of the same island or of others. Every child comes from the space, so it fits the device
and its precisions fit the tolerance; each proposal records its genome and its move (the genes changed).

Recompose is also the search's fallback: asked when the chosen expert offers nothing new, it proposes an
untried genome of the space while one is left, so a search stops for lack of proposals only once the space is
spent, and then says how much of it was tried (`coverage`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kfoundry.experts.base import Proposal, Step, Traits
from kfoundry.experts.composer.genome import ENUMERABLE, SWEEP_KERNELS, Genome, GenomeSpace, diff
from kfoundry.experts.genome_moves import MoveSteps, StepLog, gene_steps, kernel_shares, moves_for
from kfoundry.random_state import random_state_from_json, random_state_to_json

RANDOM_DRAWS = 64  # a space too large to list: untried genomes are drawn at random, this many tries a call
CROSSINGS = 8  # crossovers tried on one step for a child the search has not seen
NETWORK_HEAD = 4  # neighbours a network-wide move offers before the next move has its turn (a round)
COLD_SHARE = 0.05  # kernels under this share of the parent's GPU time are moved after the others


def genome_of(individual: Any, space: GenomeSpace) -> Genome | None:
    """The genome an individual was built from: its record's, or the space's for its source."""
    data = (getattr(individual, "record", None) or {}).get("genome")
    if data:
        genome = Genome.from_dict(data)
        return genome if space.contains(genome) else None
    hashed = getattr(individual, "source_hash", None)
    return space.genome_of(hashed) if hashed else None


@dataclass
class _Explorer:
    """What both experts share: the space, the search's record of sources, the genomes already checked."""

    space: GenomeSpace
    is_known: Callable[[str], bool]
    seed: int = 0
    tried: set[str] = field(default_factory=set)  # genome keys built and found seen, or proposed

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed + 2)

    def fresh(self, genome: Genome) -> str | None:
        """The genome's source if the search has not seen it (and it was not proposed before), else None."""
        if genome.key in self.tried:
            return None
        self.tried.add(genome.key)
        built = self.space.build(genome)
        if isinstance(built, str) or self.is_known(built[0]):
            return None
        return built[0]

    def untried(self, near: Genome | None = None) -> tuple[Genome, str] | None:
        """Any genome of the space the search has not seen, the fewest genes away from `near` first (a step
        further from the parent than its spent neighbourhood, not anywhere in the space): listed where the space
        is small enough, else drawn at random."""
        candidates = list(self.space.genomes()) if self.space.size() <= ENUMERABLE else \
            [self.space.draw(self.rng) for _ in range(RANDOM_DRAWS)]
        if near is not None:
            candidates.sort(key=lambda g: len(diff(near, g)))  # stable: the listing's order among equals
        for genome in candidates:
            source = self.fresh(genome)
            if source is not None:
                return genome, source
        return None

    def coverage(self) -> str:
        size = self.space.size()
        spent = size <= ENUMERABLE and all(g.key in self.tried for g in self.space.genomes())
        return (f"the composer's genome space is {'spent' if spent else 'not spent'}: {len(self.tried)} of "
                f"{size} genome(s) tried")

    def state(self) -> dict:
        return {"rng": random_state_to_json(self.rng), "tried": sorted(self.tried)}

    def restore(self, data: dict | None) -> None:
        if data:
            self.rng.setstate(random_state_from_json(data["rng"]))
            self.tried = set(data.get("tried") or [])


def _record(child: Genome, kind: str, parent: Genome | None, **extra: Any) -> dict:
    move = {"kind": kind, "changed": diff(parent, child) if parent is not None else {}, **extra}
    return {"genome": child.to_dict(), "move": move}


@dataclass
class RecomposeExpert(_Explorer):
    gains: dict[str, float] = field(default_factory=dict)  # move kind -> the gain the library saw
    name: str = "recompose"
    traits: Traits = Traits(changes_approach=True, fallback=True, focus=("fusion", "launch"))
    run: MoveSteps = field(default_factory=MoveSteps)  # what its moves did in this run
    genes: StepLog = field(default_factory=StepLog)  # what each gene's step did in this run

    def observe(self, child: Any, parent: Any) -> None:
        """A child of this expert was judged: what its move did to the parent's speed orders the next moves, and
        a gene's step that made children slower or wrong puts the children that take it again last."""
        move = (getattr(child, "record", None) or {}).get("move") or {}
        if move.get("kind") and parent is not None and getattr(parent, "ok", False):
            self.run.observe(move["kind"], parent.fitness, child.fitness, child.ok)
            self.genes.observe(gene_steps(move.get("changed")), parent.fitness, child.fitness, child.ok)

    def state(self) -> dict:
        return {**super().state(), "run": self.run.state(), "genes": self.genes.state()}

    def restore(self, data: dict | None) -> None:
        super().restore(data)
        self.run = MoveSteps.restore((data or {}).get("run"))
        self.genes = StepLog.restore((data or {}).get("genes"))

    async def propose(self, step: Step) -> Proposal:
        parent = step.parent
        genome = genome_of(parent, self.space) if parent is not None else None
        if genome is None:  # a tuner's or an LLM's kernel: start from the genome of an elite of its island
            genome = next((g for g in (genome_of(o, self.space) for o in step.others) if g is not None), None)
        parents = [parent.id] if parent is not None else []
        if genome is not None:
            self.tried.add(genome.key)
            for move, child in self._steps(genome, getattr(parent, "diagnosis", None)):
                source = self.fresh(child)
                if source is not None:
                    return Proposal(source, parents, _record(child, move, genome), why=step.reason)
        found = self.untried(genome)  # the neighbourhood is spent: the nearest genome not tried yet
        if found is None:
            return Proposal(None, why=f"{step.reason}; {self.coverage()}")
        child, source = found
        return Proposal(source, parents, _record(child, "explore", genome), why=step.reason)

    def _steps(self, genome: Genome, diagnosis: Any) -> Iterator[tuple[str, Genome]]:
        """(move, child) in the order they are offered: the moves in `moves_for`'s order, each move's neighbours
        nearest first. A move that reaches SWEEP_KERNELS kernels or more (a network's) offers NETWORK_HEAD
        neighbours at a time (its sweep, then single kernels) and yields to the next move, round after round:
        one move over a network's 40 kernels one at a time spent ResNet-18's whole budget. A move that reaches
        fewer offers all its neighbours in the first round: the order of plans of fewer kernels is as before.
        Where the parent's diagnosis has a timed profile, a child that changes only kernels of under COLD_SHARE of
        its GPU time comes after all the others (gemm_suite 2 and 6 spent half their budget on the tiles of row
        kernels of a few per cent before a configuration of their GEMM). A child that takes a gene's step harmful
        in this run (StepLog) comes after those."""
        shares = kernel_shares(diagnosis, self.space.kernel_functions(genome))
        harmful = self.genes.harmful()

        def cold(genes: dict[str, list]) -> bool:  # only kernels of under COLD_SHARE of the parent's GPU time
            return bool(shares) and all("." in gene for gene in genes) and \
                sum(shares.get(kernel, 0.0) for kernel in {gene.split(".")[0] for gene in genes}) < COLD_SHARE

        queues: list[tuple[str, list[Genome], bool]] = []
        for move in moves_for(diagnosis, self.gains, self.run):
            queues.append((move, self.space.neighbours(genome, move),
                           self.space.reach(genome, move) >= SWEEP_KERNELS))
        rounds = max([-(-len(children) // NETWORK_HEAD) for _, children, wide in queues if wide] + [1])
        deferred: list[tuple[str, Genome]] = []
        losing: list[tuple[str, Genome]] = []
        for round_ in range(rounds):
            for move, children, wide in queues:
                part = children[round_ * NETWORK_HEAD:(round_ + 1) * NETWORK_HEAD] if wide else \
                    (children if round_ == 0 else [])
                for child in part:
                    changed = diff(genome, child)
                    if harmful and any(step in harmful for step in gene_steps(changed)):
                        losing.append((move, child))
                    elif cold(changed):
                        deferred.append((move, child))
                    else:
                        yield move, child
        yield from deferred
        yield from losing


@dataclass
class RecombineExpert(_Explorer):
    elites: Callable[[], list[Any]] = field(default=lambda: [])  # the best of every island
    name: str = "recombine"
    traits: Traits = Traits(min_parents=2, changes_approach=True)

    async def propose(self, step: Step) -> Proposal:
        parent = step.parent
        mine = genome_of(parent, self.space) if parent is not None else None
        if mine is None:
            return Proposal(None, why=step.reason)
        others = [o for o in [*step.others, *self.elites()] if o is not parent and o.id != parent.id]
        mates = [(o, g) for o in others if (g := genome_of(o, self.space)) is not None and g != mine]
        self.rng.shuffle(mates)
        # another island's first: its genes are the likeliest to be new here
        mates.sort(key=lambda pair: getattr(pair[0], "island", None) == getattr(parent, "island", None))
        for mate, theirs in mates[:CROSSINGS]:
            child = self.space.crossover(mine, theirs, self.rng)
            source = self.fresh(child)
            if source is not None:
                record = _record(child, "crossover", mine, mate=mate.id)
                return Proposal(source, [parent.id, mate.id], record, why=step.reason)
        return Proposal(None, why=step.reason)


def states_of(experts: list[Any]) -> dict[str, dict]:
    """The genome experts' states among `experts`, by name: what a resumed run restores."""
    return {e.name: e.state() for e in experts if isinstance(e, _Explorer)}


def restore_states(experts: list[Any], data: dict | None) -> None:
    """`states_of`'s value back into the genome experts among `experts`."""
    for expert in experts:
        if isinstance(expert, _Explorer):
            expert.restore((data or {}).get(expert.name))
