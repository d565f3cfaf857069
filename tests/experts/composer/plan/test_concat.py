"""Concatenations of computed tensors: the pointwise ops after one move onto its parts, and the kernels computing
the parts write them straight into the concatenation; concatenations of inputs stay a kernel of their own."""

from pathlib import Path

from kfoundry.experts.composer.plan.fusion import plan
from kfoundry.experts.composer.plan.steps import HostStep
from tests.experts.composer.helpers import compose_ok, first, first_exact, read_model, submit, verdict
from tests.experts.composer.read.test_fx_layout import Fn

import torch

REPO = Path(__file__).resolve().parents[4]

PLACED = '''
import torch
from torch import nn

a, b, c = 3, 20, 33


class Model(nn.Module):
    def forward(self, x, y):
        channels = torch.cat([x * 2.0, torch.exp(y)], dim=1) + 1.0  # slices across a merged (b, c) block
        last = torch.sigmoid(torch.cat([x.sum(1, keepdim=True) * y, y - x], dim=2))  # along the last dim
        rows = torch.cat([x, y], dim=0) * 3.0  # parts that are inputs: one kernel reads them
        return channels, last, rows


def get_inputs():
    return [torch.randn(a, b, c), torch.randn(a, b, c)]


def get_init_inputs():
    return []
'''


def test_relu_after_a_concatenation_of_two_branches_moves_onto_them():
    graph = read_model(Fn(lambda x, y: torch.relu(torch.cat([x @ y, (x * 2) @ y], dim=1))),
                       [torch.randn(4, 5), torch.randn(5, 6)])
    the_plan = plan(graph)
    (cat,) = [s.op for s in the_plan.steps if isinstance(s, HostStep) and s.op.name == "cat"]
    assert [part.producer.name for part in cat.args] == ["relu", "relu"]
    assert all(part.placed_dim == 1 for part in cat.args)
    assert not any(op.name == "cat" for g in the_plan.groups for op in g.ops)  # no kernel copies the parts


def test_kernels_write_their_parts_in_place_and_pass_the_evaluator(tmp_path):
    path = tmp_path / "placed.py"
    path.write_text(PLACED)
    result = compose_ok(path, max_variants=1)
    source = first(result).source
    assert source.count(".narrow(1, ") == 2 and source.count(".narrow(2, ") == 2
    assert "cat" in result.message  # the rows' concatenation of two inputs is a kernel
    verdict(submit(path, source))


def test_the_conv_branches_of_the_reach_suite_are_two_kernels_writing_in_place():
    path = REPO / "benchmarks" / "reach_suite" / "4_cat_conv_branches.py"
    small = {"batch_size": 2, "channels": 16, "branch_channels": 24, "size": 7}  # channels-last convolutions
    result = compose_ok(path, set_values=small, max_variants=6)
    assert "of 2 kernel(s)" in result.message and "pointwise" not in result.message
    verdict(submit(path, first_exact(result).source, set_values=small))
