"""Loop rolling: a trace's repeated body (the steps of a Python loop, identical blocks of a ModuleList) becomes a
loop in the candidate's forward, so that the candidate's size does not grow with the number of steps or blocks,
and a loop over an input's dim runs for that dim's size at any size."""

from pathlib import Path

from kfoundry.experts.composer.compose import ComposeResult, _load, capture, copy_unwritten_outputs
from kfoundry.experts.composer.plan.rolling import candidates, roll
from kfoundry.problem import on_host
from tests.experts.composer.helpers import RNN_SIZES, compose_ok, fixture, submit, verdict



def quick(result: ComposeResult):
    """A variant the interpreter runs quickly: fp32-accurate dots without fp16 operand copies."""
    for candidate in result.candidates:
        if all(c.get("precision") in (None, "ieee", "tf32x3") for c in candidate.config.values()):
            return candidate
    raise AssertionError([c.name for c in result.candidates])


def forward_of(source: str) -> str:
    return source[source.index("    def forward", source.index("class ModelNew")):]


def test_a_python_loop_over_steps_is_one_loop_at_any_step_count():
    path = fixture("normed_rnn_loop")  # not an Elman cell (plan/recurrence.py): its loop stays a loop
    few = compose_ok(path, set_values=dict(RNN_SIZES, steps=5), max_variants=4, tolerance=1e-4)
    many = compose_ok(path, set_values=dict(RNN_SIZES, steps=16), max_variants=4, tolerance=1e-4)
    assert "a loop of 5 steps, each: (pointwise kernel (cat); matmul with add, tanh, mean" in few.message
    assert "of 4 kernel(s)" in many.message
    for a, b in zip(few.candidates, many.candidates):
        assert abs(len(a.source) - len(b.source)) <= 2  # the step count in the title only
        assert forward_of(a.source) == forward_of(b.source)
    body = forward_of(quick(few).source)
    assert "for step in range(x.shape[0]):" in body and "select(0, step)" in body
    assert "'x.shape[0]'" not in body  # the step count is not a size the kernels were built around
    # composed at 5 steps, judged at 2: the loop walks the input's first dim, whatever its size
    verdict(submit(path, quick(few).source, set_values=dict(RNN_SIZES, steps=2), tolerance=1e-4))


def test_a_backward_walk_writes_each_state_at_its_place_in_the_sequence():
    path = fixture("backward_clamped_steps")
    result = compose_ok(path, max_variants=4, tolerance=1e-4)
    body = forward_of(quick(result).source)
    assert "for step in range(x.shape[1]):" in body
    assert "x.shape[1] - 1 - step" in body and ".select(1, x.shape[1] - 1 - step)" in body
    assert "state = h" in body  # the initial state is forward's argument
    verdict(submit(path, quick(result).source, set_values={"steps": 3, "batch_size": 3}, tolerance=1e-4))


def test_identical_blocks_are_one_loop_over_the_layers_parameters():
    path = fixture("residual_blocks")
    three = compose_ok(path, set_values={"depth": 3}, max_variants=4, tolerance=1e-4)
    nine = compose_ok(path, set_values={"depth": 9}, max_variants=4, tolerance=1e-4)
    assert "a loop of 3 steps" in three.message and "a loop of 9 steps" in nine.message
    assert len(three.candidates[0].source) == len(nine.candidates[0].source)
    body = forward_of(quick(three).source)
    assert "for step in range(3):" in body
    assert "self.blocks[step].fc.weight" in body and "self.blocks[step].norm.eps" in body
    verdict(submit(path, quick(three).source, set_values={"depth": 3}, tolerance=1e-4))


SAME_LAYER_TWICE = '''
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''

MIDDLE_STEP_READ_AFTER = '''
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        states = []
        for _ in range(4):
            x = torch.tanh(self.fc(x))
            states.append(x)
        return states[1] + x


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def _graph(path: Path):
    sample = _load(path, None, False)
    with on_host(sample.device):
        return copy_unwritten_outputs(capture(sample).graph)


def test_what_does_not_repeat_as_one_body_stays_unrolled(tmp_path):
    assert roll(_graph(fixture("pointwise_steps"))) == []
    for name, text in {"two_layers": SAME_LAYER_TWICE, "middle": MIDDLE_STEP_READ_AFTER}.items():
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        assert roll(_graph(path)) == [], name
    # the middle step's value is read after the loop: composed unrolled, and correct
    result = compose_ok(tmp_path / "middle.py", max_variants=4, tolerance=1e-4)
    assert "a loop" not in result.message
    verdict(submit(tmp_path / "middle.py", quick(result).source, tolerance=1e-4))


def test_repeats_are_found_most_ops_covered_first():
    graph = _graph(fixture("residual_blocks"))
    start, period, count = candidates(graph.ops)[0]
    assert count == 4 and period * count > len(graph.ops) // 2
    [rolled] = roll(graph)
    assert rolled.loop.count == 4
    assert [p.value.path for p in rolled.loop.layer_params] == ["blocks.0.fc.weight", "blocks.0.fc.bias",
                                                               "blocks.0.norm.weight", "blocks.0.norm.bias"]


TWO_STAGES = '''
import torch
from torch import nn

batch_size = 4


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return x + torch.relu(self.fc(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Sequential(*[Block(8) for _ in range(3)])
        self.widen = nn.Linear(8, 16)
        self.second = nn.Sequential(*[Block(16) for _ in range(4)])

    def forward(self, x):
        return self.second(self.widen(self.first(x)))


def get_inputs():
    return [torch.randn(batch_size, 8)]


def get_init_inputs():
    return []
'''


def test_stages_of_identical_blocks_are_loops_one_after_the_other(tmp_path):
    path = tmp_path / "two_stages.py"
    path.write_text(TWO_STAGES)
    result = compose_ok(path, max_variants=4, tolerance=1e-4)
    assert "a loop of 3 steps" in result.message and "a loop of 4 steps" in result.message
    assert "of 3 kernel(s)" in result.message  # one per loop, and the widening Linear between them
    body = forward_of(quick(result).source)
    assert "self.first[step].fc.weight" in body and "self.second[step_2].fc.weight" in body
    verdict(submit(path, quick(result).source, tolerance=1e-4))
