"""benchmarks/conv_suite: problems numbered from 1 without a gap; problems 14-23 (issue 40) at their public sizes
(shapes only, on the meta device) move 0.3-3 GB a forward (inputs + output + the convolution's output once), and
run deterministically and finite at small sizes on the CPU. Nothing is composed or timed here."""

import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.benchmarks.small_runs import check_runs_at_small_sizes

REPO = Path(__file__).resolve().parent.parent.parent
SUITE = REPO / "benchmarks" / "conv_suite"
ISSUE_40 = range(14, 24)
SMALL = {"batch_size": 2, "in_channels": 4, "out_channels": 8, "channels": 8, "depth": 4, "height": 8, "width": 8,
         "num_groups": 4}


def problems() -> dict[int, Path]:
    return {int(path.name.split("_")[0]): path for path in SUITE.glob("[0-9]*_*.py")}


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"conv_suite_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_problems_are_numbered_without_a_gap():
    numbers = sorted(problems())
    assert numbers == list(range(1, numbers[-1] + 1)) and set(ISSUE_40) <= set(numbers)


@pytest.mark.parametrize("number", ISSUE_40)
def test_public_sizes_move_a_few_hundred_megabytes_to_gigabytes(number):
    module = load(problems()[number])
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
        output = model(*inputs)
        conv = next(m for m in model.modules() if isinstance(m, nn.modules.conv._ConvNd))
        conv_output = conv(inputs[0])
    moved = sum(t.numel() * t.element_size() for t in (*inputs, output, conv_output))
    assert 0.3e9 <= moved <= 3e9
    assert 16 <= module.batch_size <= 128


@pytest.mark.parametrize("number", ISSUE_40)
def test_the_problem_runs_at_small_sizes_and_is_deterministic(number):
    path = problems()[number]
    names = set(vars(load(path)))
    check_runs_at_small_sizes(path, {k: v for k, v in SMALL.items() if k in names}, 8)
