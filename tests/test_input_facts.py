"""kfoundry.input_facts: the inputs drawn as the judge draws them, and what every draw had in common."""

import textwrap

import pytest

from kfoundry import input_facts
from kfoundry.input_facts import problem_facts

PROBLEM = textwrap.dedent('''
    """Inputs of several kinds: a triangle, a uniform draw, indices, a transposed view and a scalar."""
    import torch
    from torch import nn

    n = 64
    rows, cols = 8, 16


    class Model(nn.Module):
        def forward(self, a, u, idx, t, k):
            return a @ a + u.sum() + idx.float().sum() + t.sum() * k


    def get_inputs():
        a = torch.triu(torch.randn(n, n))
        u = torch.rand(rows, cols)
        idx = torch.randint(0, 10, (rows,))
        t = torch.randn(cols, rows).t()
        return [a, u, idx, t, 3]


    def get_init_inputs():
        return []
''')


@pytest.fixture
def problem(tmp_path):
    path = tmp_path / "inputs_problem.py"
    path.write_text(PROBLEM)
    return path


def test_what_held_in_every_draw_is_reported_per_input(problem):
    facts = problem_facts(problem, {"n": 32})
    assert facts.draws == 2 and facts.overrides == {"n": 32} and facts.file_values == {"n": "64"}
    a, u, idx, t, k = facts.inputs
    assert a.shape == [32, 32] and a.dtype == "float32" and a.contiguous
    assert any(p.startswith("upper-triangular") for p in a.properties)
    assert not any(p.startswith("lower-triangular") for p in a.properties)
    assert "non-negative" in u.properties and 0 <= u.low and u.high < 1
    assert idx.dtype == "int64" and "non-negative" in idx.properties and idx.high <= 9
    assert t.contiguous is False and t.shape == [8, 16]
    assert k.shape is None and k.value == "int 3"
    assert "NOT contiguous" in t.line() and "values seen in [" in u.line()


def test_a_property_one_draw_lacks_is_not_reported():
    import torch

    positive = torch.ones(4, 4)
    mixed = -torch.ones(4, 4)
    fact = input_facts.describe([[positive], [mixed]])[0]
    assert "non-negative" not in fact.properties
    assert (fact.low, fact.high) == (-1.0, 1.0) and "integer-valued" in fact.properties


def test_large_inputs_are_described_by_shape_alone(problem, monkeypatch):
    monkeypatch.setattr(input_facts, "MAX_DRAW_BYTES", 1024)
    facts = problem_facts(problem)
    assert facts.draws == 0 and "values not examined" in facts.why_not_drawn
    assert facts.inputs[0].shape == [64, 64] and facts.inputs[0].properties == []
