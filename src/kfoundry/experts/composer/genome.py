"""The composer's decisions for one candidate as a genome, and the space of a problem's genomes.

A genome holds every choice behind a composed candidate: which of the composer's plans it uses (the fusions
switched on: a norm's statistics gathered in the conv epilogue, pooling before the conv's store; or off: a
reduction, or a costly function ending the epilogue, moved to a kernel after it), each
kernel's configuration (tiles, warps, stages, tile groups, the dot's precision, a conv's layout: whatever its
template offers: the GEMM template a persistent kernel too, operand tiles through tensor descriptors, and split-K
where the output has too few tiles to fill the GPU), and whether the forward
replays from a CUDA graph. The space knows
each plan's kernels and the configurations each may take (fitted to the device's limits, precisions the
tolerance admits: compose.kernel_options), so every genome in it is valid by construction, and it builds a
genome into the candidate's source (the same source the composer wrote for it). Moves (neighbours), crossover
and random draws stay inside the space.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kfoundry.source_identity import source_hash

PlanKey = tuple[str, ...]  # the plan's switches from the plain plan (); sorted
REDUCTION_APART = "reduction_apart"  # a reduction over a product's features in a kernel of its own, not its epilogue
TAIL_IN_ROW = "tail_in_row"  # a costly function ending a product's epilogue computed in the norm's row kernel instead
APART = frozenset({REDUCTION_APART, TAIL_IN_ROW})  # switches that move work out of a kernel; the others fuse two
Options = dict[str, list[dict]]  # kernel name -> the configurations it may take
MOVES = ("fuse", "split", "graph", "tiles_up", "tiles_down", "precision", "accurate", "layout", "config",
         "split_k")
ENUMERABLE = 4096  # spaces up to this size are listed whole: exhaustion is then exact
# a move with a direction that reaches this many kernels (a network's: conv_suite's and gemm_suite's plans have 5 at
# most) is offered on all of them at once, first: one kernel a step leaves a 72-kernel network nearly where it was
# after a 32-evaluation search
SWEEP_KERNELS = 6
SWEEPS = ("tiles_up", "tiles_down", "precision", "accurate", "layout", "split_k")
# cheaper main loops first (fp16 copies and TF32 one pass; fp16x3 and TF32x3 three; IEEE on the FMA units)
PRECISION_COST = {"fp16": 0, "tf32": 1, "default": 1, "fp16x3": 2, "tf32x3": 3, "ieee": 4}
TILE_KEYS = ("BM", "BN", "BLOCK", "BR", "BC")


@dataclass(frozen=True, eq=False)
class Genome:
    plan: PlanKey
    configs: dict[str, dict]  # kernel (group) name -> its configuration
    graph: bool = False

    @property
    def key(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_dict(self) -> dict:
        return {"plan": list(self.plan), "configs": self.configs, "graph": self.graph}

    @classmethod
    def from_dict(cls, data: dict) -> Genome:
        return cls(tuple(data["plan"]), {k: dict(v) for k, v in data["configs"].items()}, bool(data.get("graph")))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Genome) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)


def diff(before: Genome, after: Genome) -> dict[str, list]:
    """The genes that differ: {gene: [before, after]} (plan, graph, kernel.setting)."""
    changed: dict[str, list] = {}
    if before.plan != after.plan:
        changed["plan"] = ["+".join(before.plan) or "plain", "+".join(after.plan) or "plain"]
    if before.graph != after.graph:
        changed["graph"] = [before.graph, after.graph]
    for name in sorted(set(before.configs) | set(after.configs)):
        a, b = before.configs.get(name, {}), after.configs.get(name, {})
        for setting in sorted(set(a) | set(b)):
            if a.get(setting) != b.get(setting):
                changed[f"{name}.{setting}"] = [a.get(setting), b.get(setting)]
    return changed


def tile_area(config: dict) -> int:
    return math.prod(int(config[k]) for k in TILE_KEYS if isinstance(config.get(k), int))


class GenomeSpace:
    """`options`: per plan, its kernels' configurations; `graphable`: per plan, whether a CUDA-graph replay is
    offered; `render(genome)`: (source, label, the kernel function each kernel launches), or the reason it cannot
    be written (a self-check failure)."""

    def __init__(self, options: dict[PlanKey, Options], graphable: dict[PlanKey, bool],
                 render: Callable[[Genome], tuple[str, str, dict[str, str]] | str]):
        self.options = options
        self.graphable = graphable
        self._render = render
        self._built: dict[str, tuple[str, str] | str] = {}
        self._functions: dict[str, dict[str, str]] = {}  # genome key -> kernel name -> its kernel function
        self._by_source: dict[str, Genome] = {}  # normalized-source hash -> the genome built into it

    # -- the space -----------------------------------------------------------------------------------
    def size(self) -> int:
        return sum(math.prod(len(c) for c in options.values()) * (2 if self.graphable[key] else 1)
                   for key, options in self.options.items())

    def contains(self, genome: Genome) -> bool:
        options = self.options.get(genome.plan)
        return options is not None and set(genome.configs) == set(options) and \
            all(genome.configs[name] in choices for name, choices in options.items()) and \
            (not genome.graph or self.graphable[genome.plan])

    def genomes(self) -> Iterator[Genome]:
        """Every genome, plan by plan."""
        for key, options in self.options.items():
            names = list(options)
            for graph in ([False, True] if self.graphable[key] else [False]):
                for choice in itertools.product(*(options[n] for n in names)):
                    yield Genome(key, dict(zip(names, choice)), graph)

    def draw(self, rng: random.Random) -> Genome:
        key = rng.choice(list(self.options))
        configs = {name: rng.choice(choices) for name, choices in self.options[key].items()}
        return Genome(key, configs, self.graphable[key] and rng.random() < 0.5)

    def build(self, genome: Genome) -> tuple[str, str] | str:
        """(source, label) of the genome's candidate, or why none could be written."""
        if not self.contains(genome):
            return "not a genome of this problem's space"
        if genome.key not in self._built:
            rendered = self._render(genome)
            if isinstance(rendered, str):
                self._built[genome.key] = rendered
            else:
                source, label, functions = rendered
                self._built[genome.key] = (source, label)
                self._functions[genome.key] = functions
                self._by_source[source_hash(source)] = genome
        return self._built[genome.key]

    def kernel_functions(self, genome: Genome) -> dict[str, str]:
        """Kernel (group) name -> the name of the kernel function it launches in the genome's source (a
        profile's kernel names); {} where the genome cannot be built."""
        self.build(genome)
        return self._functions.get(genome.key, {})

    def genome_of(self, hashed_source: str) -> Genome | None:
        """The genome a source (by its normalized hash) was built from here, if it was."""
        return self._by_source.get(hashed_source)

    # -- moves ---------------------------------------------------------------------------------------
    def adapted(self, genome: Genome, plan: PlanKey, graph: bool | None = None) -> Genome:
        """The genome on another plan: each kernel keeps its configuration where that plan has the kernel and
        offers it, else takes the plan's first."""
        configs = {name: genome.configs[name] if genome.configs.get(name) in choices else choices[0]
                   for name, choices in self.options[plan].items()}
        graph = genome.graph if graph is None else graph
        return Genome(plan, configs, graph and self.graphable[plan])

    def neighbours(self, genome: Genome, move: str) -> list[Genome]:
        """The genomes one `move` away (MOVES), nearest first; for a move with a direction that reaches
        SWEEP_KERNELS kernels or more, first the genome with every such kernel's nearest step."""
        if move in ("fuse", "split"):
            mine = _fusions(genome.plan)
            keys = [k for k in self.options if (_fusions(k) > mine if move == "fuse" else _fusions(k) < mine)]
            keys.sort(key=lambda k: abs(_fusions(k) - mine))
            return [self.adapted(genome, k) for k in keys]
        if move == "graph":
            return [Genome(genome.plan, genome.configs, not genome.graph)] if self.graphable[genome.plan] else []
        out: list[Genome] = []
        nearest: dict[str, dict] = {}
        for name, moved in self._kernel_steps(genome, move).items():
            nearest[name] = moved[0]
            for config in moved:
                out.append(Genome(genome.plan, dict(genome.configs, **{name: config}), genome.graph))
        if move in SWEEPS and len(nearest) >= SWEEP_KERNELS:  # every kernel's nearest step at once
            out.insert(0, Genome(genome.plan, dict(genome.configs, **nearest), genome.graph))
        return out

    def reach(self, genome: Genome, move: str) -> int:
        """How many of the genome's kernels `move` has a step for (0 for the plan's and the graph's moves)."""
        return 0 if move in ("fuse", "split", "graph") else len(self._kernel_steps(genome, move))

    def _kernel_steps(self, genome: Genome, move: str) -> dict[str, list[dict]]:
        """Kernel name -> its configurations one `move` away, nearest first (kernels with none left out)."""
        steps = {}
        for name, choices in self.options[genome.plan].items():
            moved = _kernel_moves(genome.configs[name], choices, move)
            if moved:
                steps[name] = moved
        return steps

    def crossover(self, a: Genome, b: Genome, rng: random.Random) -> Genome:
        """The plan and graph of one parent; each kernel's configuration from either where the plan has it."""
        lead = a if rng.random() < 0.5 else b
        configs = {}
        for name, choices in self.options[lead.plan].items():
            offered = [g.configs[name] for g in (a, b) if g.configs.get(name) in choices]
            configs[name] = rng.choice(offered) if offered else choices[0]
        graph = rng.choice([a.graph, b.graph]) and self.graphable[lead.plan]
        return Genome(lead.plan, configs, graph)


def _fusions(plan: PlanKey) -> int:
    """How many kernels a plan's switches join, less those they keep apart."""
    return sum(-1 if switch in APART else 1 for switch in plan)


def _kernel_moves(now: dict, choices: list[dict], move: str) -> list[dict]:
    """One kernel's other configurations that `move` reaches, nearest first."""
    same_kind = [c for c in choices if c != now and c.get("precision") == now.get("precision")
                 and c.get("layout") == now.get("layout")]
    if move == "tiles_up":
        return sorted([c for c in same_kind if tile_area(c) > tile_area(now)], key=tile_area)
    if move == "tiles_down":
        return sorted([c for c in same_kind if tile_area(c) < tile_area(now)], key=tile_area, reverse=True)
    if move in ("precision", "accurate"):  # the same tiles at a cheaper main-loop precision, the cheapest first (a
        # faster child of a correct parent), or at a costlier one, the nearest first (fewer rounding errors: a repair)
        def rest(c: dict) -> dict:
            return {k: v for k, v in c.items() if k != "precision"}

        def cost(c: dict) -> int:
            return PRECISION_COST.get(c.get("precision"), 5)
        other = [c for c in choices if (cost(c) < cost(now) if move == "precision" else cost(c) > cost(now))]
        found = [c for c in other if rest(c) == rest(now)] or \
            [c for c in other if all(c.get(k) == now.get(k) for k in TILE_KEYS)]  # its own BK, warps, stages
        return sorted(found, key=cost)
    if move == "layout":
        return [c for c in choices if c != now and c.get("layout") != now.get("layout")]
    if move == "split_k":  # the same main loop with K shared by more programs a tile (fewer after), nearest first
        def parts(c: dict) -> int:
            return int(c.get("SPLIT_K", 1))
        return sorted([c for c in same_kind if parts(c) != parts(now)],
                      key=lambda c: (parts(c) < parts(now), abs(math.log2(parts(c) / parts(now)))))
    if move == "config":  # the same main loop first (other shapes, tile groups, persistence), then the rest
        return sorted([c for c in choices if c != now], key=lambda c: c.get("precision") != now.get("precision"))
    return []
