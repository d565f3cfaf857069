"""Reversed and exclusive scans written with flips and concatenations become one scan kernel; what only looks
like them does not."""

import torch
from torch import nn

from kfoundry.experts.composer.plan.fusion import plan
from tests.experts.composer.helpers import compose_ok, first, read_model, submit, verdict

DIRECTED = '''
import torch
from torch import nn

a, b, c = 3, 300, 5


class Model(nn.Module):
    def forward(self, x, keep):
        reversed_rows = torch.flip(torch.cumsum(torch.flip(x, dims=[0]), dim=0), dims=[0])
        inclusive = torch.cumsum(x * keep, dim=1)
        exclusive = torch.cat([torch.zeros_like(inclusive[:, :1]), inclusive[:, :-1]], dim=1)
        flipped = torch.flip(x, dims=[2])
        growth = torch.cumprod(1.0 + 0.01 * flipped, dim=2)
        reversed_exclusive = torch.flip(torch.cat([torch.ones_like(growth[..., :1]), growth[..., :-1]], -1), dims=[2])
        return reversed_rows, exclusive, reversed_exclusive


def get_inputs():
    return [torch.randn(a, b, c), (torch.rand(a, b, c) > 0.3).float()]


def get_init_inputs():
    return []
'''


def test_flipped_and_shifted_scans_are_one_kernel_each_and_pass_the_evaluator(tmp_path):
    path = tmp_path / "directed.py"
    path.write_text(DIRECTED)
    result = compose_ok(path, max_variants=1)
    assert "of 3 kernel(s)" in result.message
    assert "reversed cumsum" in result.message and "mul fused into exclusive cumsum" in result.message
    assert "add fused into reversed exclusive cumprod" in result.message
    verdict(submit(path, first(result).source))


class NotDirected(nn.Module):
    def forward(self, x):
        across = torch.flip(torch.cumsum(torch.flip(x, dims=[1]), dim=0), dims=[1])  # flips along another dim
        inclusive = torch.cumsum(x, dim=1)
        shifted = torch.cat([torch.ones_like(inclusive[:, :1]), inclusive[:, :-1]], dim=1)  # 1 is not a sum's identity
        return across, shifted, inclusive


def test_scans_flipped_along_another_dim_or_shifted_in_with_another_number_stay_as_written():
    graph = read_model(NotDirected(), [torch.randn(4, 6)])
    names = [op.name for op in plan(graph).graph.ops]
    assert names.count("flip") == 2 and names.count("cat") == 1
    scans = [op for op in plan(graph).graph.ops if op.name == "cumsum"]
    assert not any(op.attrs.get("reverse") or op.attrs.get("exclusive") for op in scans)
