"""A costly function ending a convolution's epilogue, moved past the norm's view into its row kernel (TAIL_IN_ROW):
planned where a GELU, tanh chain or SiLU before a GroupNorm follows the product, composed as a first variant and
judged ok at 1e-4 by the real evaluator; cheap tails, tails read elsewhere and tails that no reduction reads stay
in the epilogue."""

from pathlib import Path

import pytest

from kfoundry.experts.composer.genome import TAIL_IN_ROW
from kfoundry.experts.composer.ir.graph import RESHAPES
from kfoundry.experts.composer.plan.fusion import plan, plan_with_tails_in_rows
from kfoundry.experts.composer.plan.tails import raised_tails
from tests.experts.composer.helpers import compose_ok, conv_norm_problem, submit_all, verdict
from tests.experts.composer.plan.test_conv_statistics import CONV2D
from tests.experts.composer.plan.test_rolling import _graph


def _problem(tmp_path: Path, tail: str) -> Path:
    return conv_norm_problem(tmp_path / "problem.py", dict(CONV2D, tail=tail))


def _conv_and_row(the_plan):
    kinds = [g.kind for g in the_plan.groups]
    assert kinds == ["conv", "row"], kinds
    conv, row = the_plan.groups
    return [op.name for op in conv.ops], [op.name for op in row.ops]


@pytest.mark.parametrize("tail, moved", [
    ("self.gn(F.gelu(y))", ["gelu"]),
    ("self.gn(torch.tanh(F.gelu(y)) * 2.0)", ["gelu", "tanh", "mul"]),  # a chain: every one-element function
    ("self.gn(F.silu(y * self.scale))", ["silu"]),  # the product by a tensor stays in the epilogue
])
def test_a_costly_tail_runs_in_the_norms_row_kernel(tmp_path, tail, moved):
    path = _problem(tmp_path, tail)
    conv_ops, row_ops = _conv_and_row(plan(_graph(path)))
    tailed = plan_with_tails_in_rows(_graph(path))
    assert tailed is not None
    tailed_conv, tailed_row = _conv_and_row(tailed)
    for name in moved:
        assert name not in tailed_conv and name in tailed_row, (tailed_conv, tailed_row)
    assert sorted(tailed_conv + tailed_row) == sorted(conv_ops + row_ops)  # the same ops, on the other side


@pytest.mark.parametrize("tail", [
    "self.gn(torch.relu(y))",  # cheap: free in the epilogue
    "(lambda z: self.gn(z) + z)(F.gelu(y))",  # the GELU is also read element for element elsewhere
    "F.gelu(y).reshape(2, 4, 2, 18, 18) * 2.0",  # a view no reduction reads
    "self.gn(F.gelu(x[:, :1, 1:-1, 1:-1] * self.scale))",  # no product before the GELU
])
def test_other_tails_stay_where_they_are(tmp_path, tail):
    assert raised_tails(_graph(_problem(tmp_path, tail))) == 0
    assert plan_with_tails_in_rows(_graph(_problem(tmp_path, tail))) is None


def test_the_raised_graph_reads_the_view_of_the_products_value(tmp_path):
    graph = _graph(_problem(tmp_path, "self.gn(F.gelu(y))"))
    assert raised_tails(graph) == 1
    gelu = next(op for op in graph.ops if op.name == "gelu")
    view = gelu.args[0].producer
    assert view.name in RESHAPES and view.args[0].producer.name in ("conv", "add")
    assert raised_tails(graph) == 0  # nothing left to raise


def test_the_tail_variant_is_composed_first_and_judged_ok(tmp_path):
    path = _problem(tmp_path, "self.gn(F.gelu(y))")
    result = compose_ok(path, max_variants=3, tolerance=1e-4)
    names = [c.name for c in result.candidates]
    tailed = [c for c in result.candidates if c.name.endswith(f"_{TAIL_IN_ROW}")]
    assert len(tailed) == 1 and len(names) == 3, names  # moments, plain, tail: the first of each plan
    assert tailed[0].genome.plan == (TAIL_IN_ROW,)
    source = tailed[0].source
    conv_kernel = source.split("def _conv")[1].split("@triton.jit")[0]
    row_kernel = source.split("def _row")[1].split("@triton.jit")[0]
    assert "tl.erf" not in conv_kernel and "tl.erf" in row_kernel
    plain = next(c for c in result.candidates if c.genome.plan == ())
    assert plain.source != source
    # the genome experts reach it from the plain plan by a split, and come back by a fusion
    space = result.space
    assert tailed[0].genome in space.neighbours(plain.genome, "split")
    assert any(g.plan == () for g in space.neighbours(tailed[0].genome, "fuse"))
    evaluations = submit_all(path, [source, plain.source], tolerance=1e-4).result()
    assert len(evaluations) == 2
    for evaluation in evaluations:
        verdict(evaluation)
