"""The composer's genome: every composed candidate is rebuilt from its genome into the same source; every move,
crossover and draw stays in the space (configurations fitted to the device, precisions the tolerance admits);
a child one move away is a correct candidate."""

import json
import random
from pathlib import Path

import pytest

from kfoundry.experts.composer.genome import ENUMERABLE, MOVES, SWEEP_KERNELS, Genome, diff, tile_area
from tests.experts.composer.helpers import compose_ok, conv_norm_problem, fixture, submit_all, verdict

CONV = {"conv": "nn.Conv2d(8, 8, 3)", "d": "2", "ln": "8", "input": "2, 8, 10, 10", "field": "8, 8",
        "tail": "torch.clamp(F.max_pool2d(self.gn(y) * self.scale, 2), 0.0, 1.0)"}


@pytest.fixture(scope="module")
def conv_pool(tmp_path_factory) -> tuple[Path, object]:
    path = conv_norm_problem(tmp_path_factory.mktemp("genome") / "conv_gn_pool.py", CONV)
    return path, compose_ok(path, max_variants=8, tolerance=1e-4)


def test_every_composed_candidate_is_rebuilt_from_its_genome(conv_pool):
    _, result = conv_pool
    space = result.space
    assert {c.genome.plan for c in result.candidates} == {("moments", "pooled"), ("moments",), ()}
    for candidate in result.candidates:
        genome = candidate.genome
        assert space.contains(genome) and genome.configs == candidate.config
        again = Genome.from_dict(json.loads(json.dumps(genome.to_dict())))
        assert again == genome and again.key == genome.key
        source, label = space.build(again)
        assert source == candidate.source and candidate.name.startswith(label)


def test_a_gemm_and_a_network_round_trip_too():
    for path in (fixture("linear_gelu_scale"), fixture("residual_blocks")):
        result = compose_ok(path, max_variants=4)
        for candidate in result.candidates:
            assert result.space.build(candidate.genome)[0] == candidate.source


def test_the_space_lists_every_genome_and_each_is_valid(conv_pool):
    _, result = conv_pool
    space = result.space
    assert space.size() <= ENUMERABLE
    genomes = list(space.genomes())
    assert len(genomes) == space.size() == len({g.key for g in genomes})
    assert all(space.contains(g) for g in genomes)
    outside = Genome((), dict(genomes[0].configs, conv_0=dict(genomes[0].configs["conv_0"], BM=48)))
    assert not space.contains(outside) and isinstance(space.build(outside), str)


def test_moves_change_what_they_name_and_stay_in_the_space(conv_pool):
    _, result = conv_pool
    space = result.space
    plain = next(c.genome for c in result.candidates if c.genome.plan == ())
    fused = space.neighbours(plain, "fuse")
    assert [g.plan for g in fused] == [("moments",), ("moments", "pooled")]  # nearest first
    assert all(space.contains(g) for g in fused)
    assert [g.plan for g in space.neighbours(fused[-1], "split")] == [("moments",), ()]
    # three kernels: the first variants are not replayed (few launches), but the graph gene is there to try
    assert not any(c.genome.graph for c in result.candidates)
    graphed = space.neighbours(plain, "graph")
    assert [(g.plan, g.configs, g.graph) for g in graphed] == [((), plain.configs, True)]
    assert "_cuda_graphed(self" in space.build(graphed[0])[0]
    for move in ("tiles_up", "tiles_down", "precision", "layout", "config"):
        for child in space.neighbours(plain, move):
            assert space.contains(child)
            changed = diff(plain, child)
            assert changed and len({gene.split(".")[0] for gene in changed}) == 1  # one kernel's genes
            kernel = next(iter(changed)).split(".")[0]
            before, after = plain.configs[kernel], child.configs[kernel]
            if move == "tiles_up":
                assert tile_area(after) > tile_area(before) and after.get("precision") == before.get("precision")
            if move == "tiles_down":
                assert tile_area(after) < tile_area(before)
            if move == "precision":  # the same tiles (its own BK, warps and stages)
                assert f"{kernel}.precision" in changed and all(after.get(k) == before.get(k) for k in ("BM", "BN"))
        if move == "config":  # the same main loop's other configurations first
            same = [c.configs["conv_0"].get("precision") == plain.configs["conv_0"].get("precision")
                    for c in space.neighbours(plain, move) if c.configs["conv_0"] != plain.configs["conv_0"]]
            assert same == sorted(same, reverse=True) and True in same and False in same
    # a cheaper main loop, the cheapest first (a faster child), or a costlier one, the nearest first (a repair)
    assert [g.configs["conv_0"]["precision"] for g in space.neighbours(plain, "precision")] == ["fp16", "tf32"]
    assert space.neighbours(plain, "accurate") == []  # TF32x3 is the most accurate loop offered here
    cheap = next(c.genome for c in result.candidates if c.genome.configs["conv_0"]["precision"] == "fp16")
    assert [g.configs["conv_0"]["precision"] for g in space.neighbours(cheap, "accurate")] == ["tf32", "tf32x3"]
    assert space.neighbours(cheap, "precision") == []
    assert set(MOVES) >= {"fuse", "split", "graph", "tiles_up", "tiles_down", "precision", "accurate", "layout",
                          "config"}


def test_a_move_that_reaches_many_kernels_takes_each_ones_nearest_step_at_once_first():
    """A network's plan (12 kernels here): a move with a direction is first offered on every kernel it reaches, then
    kernel by kernel; the three kernels of conv_pool get no such sweep (the test above: one kernel a child)."""
    result = compose_ok(fixture("network_splits"), max_variants=1)
    space, genome = result.space, result.candidates[0].genome
    assert len(genome.configs) >= SWEEP_KERNELS
    for move in ("tiles_up", "tiles_down"):
        sweep, *singles = space.neighbours(genome, move)
        reached = {gene.split(".")[0] for gene in diff(genome, sweep)}
        assert space.contains(sweep) and len(reached) >= SWEEP_KERNELS
        assert all(len({gene.split(".")[0] for gene in diff(genome, child)}) == 1 for child in singles)
        for name in reached:  # each kernel's own nearest step
            own = next(c.configs[name] for c in singles if c.configs[name] != genome.configs[name])
            assert sweep.configs[name] == own
    assert len({gene.split(".")[0] for gene in diff(genome, space.neighbours(genome, "config")[0])}) == 1


def test_crossover_and_draws_stay_in_the_space(conv_pool):
    _, result = conv_pool
    space = result.space
    rng = random.Random(3)
    genomes = [c.genome for c in result.candidates]
    for _ in range(40):
        a, b = rng.sample(genomes, 2)
        child = space.crossover(a, b, rng)
        assert space.contains(child) and child.plan in (a.plan, b.plan)
        for name, config in child.configs.items():
            assert config in (a.configs.get(name), b.configs.get(name)) or config == space.options[child.plan][name][0]
        assert space.contains(space.draw(rng))


def test_a_child_one_move_away_is_a_correct_candidate(conv_pool):
    path, result = conv_pool
    space = result.space
    plain = next(c.genome for c in result.candidates if c.genome.plan == () and
                 c.genome.configs["conv_0"]["precision"] == "tf32x3")
    child = space.neighbours(plain, "fuse")[-1]
    assert child.plan == ("moments", "pooled") and child.configs["conv_0"] == plain.configs["conv_0"]
    # correctness, without the guard's extra runs (helpers.py: the composer's own variants are judged with them)
    evaluation, = submit_all(path, [space.build(child)[0]], tolerance=1e-4, guard_runs=False).result()
    verdict(evaluation)


def test_a_reduction_in_the_epilogue_may_be_kept_apart(tmp_path):
    """A fusion boundary as a gene: softmax over a Linear's features in its epilogue (the first variants), or in
    a row kernel of its own, a plan only the genome experts try."""
    path = tmp_path / "linear_softmax.py"
    path.write_text(LINEAR_SOFTMAX)
    result = compose_ok(path, max_variants=4, tolerance=1e-4)
    space = result.space
    assert {c.genome.plan for c in result.candidates} == {()} and "row kernel" not in result.message
    assert set(space.options) == {(), ("reduction_apart",)}
    fused = result.candidates[0].genome
    apart, = space.neighbours(fused, "split")
    assert apart.plan == ("reduction_apart",) and space.neighbours(fused, "fuse") == []
    assert [g.plan for g in space.neighbours(apart, "fuse")] == [()]
    source, label = space.build(apart)
    assert label.endswith("_2kernels_reduction_apart") and "def _row_" in source
    evaluation, = submit_all(path, [source], tolerance=1e-4, guard_runs=False).result()  # correctness, as above
    verdict(evaluation)


LINEAR_SOFTMAX = '''import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 48)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=-1) * 2.0


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
'''
