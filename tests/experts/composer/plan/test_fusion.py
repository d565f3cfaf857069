"""Fusion planning: which ops share a kernel, and which values are written to memory."""

import torch

from kfoundry.experts.composer.ir.builder import GraphBuilder
from kfoundry.experts.composer.plan.fusion import common_subexpressions, plan, reductions_through_views, sink_views
from kfoundry.experts.composer.plan.steps import HostStep


def _builder():
    b = GraphBuilder()
    return b, b.input("x", 0, torch.randn(8, 16))


def kinds(the_plan):
    return [(g.kind, [op.name for op in g.ops]) for g in the_plan.groups]


def test_pointwise_chain_after_a_gemm_is_its_epilogue():
    b, x = _builder()
    w = b.param("w", torch.randn(16, 12))
    bias = b.param("bias", torch.randn(12))
    y = b.op("matmul", [x, w])
    z = b.op("mul", [b.op("gelu", [b.op("add", [y, bias])], approximate="none"), 0.5])
    b.graph.outputs = [z]
    the_plan = plan(b.graph)
    assert kinds(the_plan) == [("gemm", ["add", "gelu", "mul"])]
    assert the_plan.groups[0].exports == [z]


def test_a_reduction_and_its_pointwise_neighbours_make_one_row_kernel():
    b, x = _builder()
    w = b.param("w", torch.randn(16))
    sq = b.op("mul", [x, x])
    ms = b.op("mean", [sq], dims=(1,), keepdim=True)
    out = b.op("mul", [b.op("mul", [x, b.op("rsqrt", [b.op("add", [ms, 1e-6])])]), w])
    b.graph.outputs = [out]
    the_plan = plan(b.graph)
    assert kinds(the_plan) == [("row", ["mul", "mean", "add", "rsqrt", "mul", "mul"])]
    group = the_plan.groups[0]
    assert group.reduced == (1,) and group.exports == [out]
    assert group.vmap[ms] == (0, None)  # a row value, broadcast along the reduced dim


def test_reductions_over_other_dims_start_a_new_kernel_and_the_first_result_is_written():
    b, x = _builder()
    s = b.op("sum", [x], dims=(1,), keepdim=True)
    d = b.op("sub", [x, s])
    m = b.op("amax", [d], dims=(0,), keepdim=False)
    b.graph.outputs = [m]
    the_plan = plan(b.graph)
    assert [g.reduced for g in the_plan.groups] == [(1,), (0,)]
    assert the_plan.groups[0].exports == [d]


def test_siblings_of_one_input_share_a_kernel():
    b, x = _builder()
    outs = [b.op("sum", [x], dims=(1,), keepdim=False), b.op("argmax", [x], dim=1, keepdim=False),
            b.op("relu", [x]), b.op("sigmoid", [x])]
    b.graph.outputs = outs
    the_plan = plan(b.graph)
    assert len(the_plan.groups) == 1 and set(the_plan.groups[0].exports) == set(outs)


def test_a_small_pointwise_group_grows_into_the_broadcast_space():
    b = GraphBuilder()
    x = b.input("x", 0, torch.randn(2, 3, 4, 4))
    var = b.param("var", torch.randn(3, 1, 1))
    rstd = b.op("rsqrt", [b.op("add", [var, 1e-5])])
    out = b.op("mul", [x, rstd])
    b.graph.outputs = [out]
    the_plan = plan(b.graph)
    assert kinds(the_plan) == [("pointwise", ["add", "rsqrt", "mul"])]
    group = the_plan.groups[0]
    assert group.space == (2, 3, 4, 4) and group.vmap[rstd] == (1, None, None)


def test_views_sink_below_unary_ops_and_split_kernels_otherwise():
    b, x = _builder()
    s = b.op("exp", [x])
    n = b.sym("sym_size", [x], 8, dim=0)
    viewed = b.op("reshape", [s], sizes=(n, 4, 4))
    out = b.op("relu", [viewed])
    b.graph.outputs = [out]
    graph = sink_views(b.graph)
    assert [op.name for op in graph.ops] == ["exp", "sym_size", "relu", "reshape"]
    the_plan = plan(graph)
    assert kinds(the_plan) == [("pointwise", ["exp", "relu"])]
    assert any(isinstance(s, HostStep) and s.op.name == "reshape" for s in the_plan.steps)


def test_an_op_never_joins_a_kernel_that_runs_before_its_inputs():
    b, x = _builder()
    a = b.op("exp", [x])
    total = b.op("sum", [b.op("sigmoid", [x])], dims=(0, 1), keepdim=True)  # a later kernel (full reduction)
    out = b.op("mul", [a, total])  # joins the row kernel of `total`, reading `a` from memory
    b.graph.outputs = [out]
    the_plan = plan(b.graph)
    order = {g: i for i, g in enumerate(the_plan.groups)}
    for group in the_plan.groups:
        for value, _ in group.leaves():
            producer = next((g for g in the_plan.groups if value in g.vmap), None)
            assert producer is None or order[producer] < order[group]


def test_reductions_over_a_gemm_tile_stay_in_its_epilogue():
    b, x = _builder()
    w = b.param("w", torch.randn(16, 12))
    y = b.op("matmul", [x, w])
    top = b.op("amax", [y], dims=(1,), keepdim=True)
    e = b.op("exp", [b.op("sub", [y, top])])
    soft = b.op("div", [e, b.op("sum", [e], dims=(1,), keepdim=True)])
    col = b.op("sum", [y], dims=(0,), keepdim=False)  # along M: not along the tile
    b.graph.outputs = [soft, col]
    the_plan = plan(b.graph)
    assert kinds(the_plan) == [("gemm", ["amax", "sub", "exp", "sum", "div"]), ("row", ["sum"])]
    assert the_plan.groups[0].reduced == (1,)


def test_common_subexpressions_are_computed_once():
    b, x = _builder()
    first_max = b.op("amax", [x], dims=(1,), keepdim=True)
    again = b.op("amax", [x], dims=(1,), keepdim=True)
    b.graph.outputs = [b.op("sub", [x, first_max]), b.op("add", [x, again])]
    graph = common_subexpressions(b.graph)
    assert [op.name for op in graph.ops] == ["amax", "sub", "add"]
    assert graph.ops[2].args[1] is first_max


def test_views_sink_below_binary_ops_with_a_same_shaped_partner():
    b = GraphBuilder()
    x = b.input("x", 0, torch.randn(2, 8, 3))
    residual = b.input("r", 1, torch.randn(2, 24))
    normed = b.op("mul", [x, b.op("rsqrt", [b.op("mean", [b.op("mul", [x, x])], dims=(1, 2), keepdim=True)])])
    n = b.sym("sym_size", [x], 2, dim=0)
    flat = b.op("reshape", [normed], sizes=(n, -1))
    act = b.op("sigmoid", [flat])
    out = b.op("add", [b.op("mul", [flat, act]), residual])  # swish of the view, then a residual in the flat shape
    b.graph.outputs = [out]
    the_plan = plan(b.graph)
    assert len(the_plan.groups) == 1  # the norm, the swish and the residual add in one row kernel
    views = [s.op for s in the_plan.steps if isinstance(s, HostStep) and s.op.name == "reshape"]
    assert any(v.args[0] is residual for v in views)  # the residual is read regrouped like the norm's input
    assert views[-1].out is out


def _regrouped(sizes):
    """A (2, 4, 3, 5) input reshaped to `sizes`: the builder and the view."""
    b = GraphBuilder()
    x = b.input("x", 0, torch.randn(2, 4, 3, 5))
    return b, x, b.op("reshape", [b.op("exp", [x])], sizes=sizes)


def test_a_reduction_over_a_views_trailing_dims_reads_its_source():
    b, x, view = _regrouped((2, 2, 2, 15))
    total = b.op("sum", [view], dims=(1, 2, 3), keepdim=False)  # everything but the kept first dim
    tail = b.op("amax", [view], dims=(-1, -2), keepdim=False)  # the view's (2, 2) before them is not the source's
    b.graph.outputs = [total, tail]
    graph = reductions_through_views(b.graph)
    source = view.producer.args[0]
    assert total.producer.args[0] is source and total.producer.attrs["dims"] == (1, 2, 3)
    assert tail.producer.args[0] is view
    assert graph.ops.count(view.producer) == 1  # still read by the max
    # in the plan, the sum joins the kernel of the exp (a row kernel over the source's space), the view is gone
    b2, x2, view2 = _regrouped((2, 60))
    mean = b2.op("mean", [view2], dims=(1,), keepdim=False)
    b2.graph.outputs = [mean]
    the_plan = plan(b2.graph)
    assert kinds(the_plan) == [("row", ["exp", "mean"])] and the_plan.groups[0].reduced == (1, 2, 3)
    assert not any(isinstance(s, HostStep) and s.op.name == "reshape" for s in the_plan.steps)


def test_reductions_that_keep_dims_or_split_a_kept_dim_read_the_view():
    b, x, view = _regrouped((2, 60))
    kept = b.op("sum", [view], dims=(1,), keepdim=True)  # (2, 1): its shape is the view's
    b3, x3, view3 = _regrouped((8, 15))  # the first dim of the view is not the source's
    split = b3.op("sum", [view3], dims=(1,), keepdim=False)
    b.graph.outputs, b3.graph.outputs = [kept], [split]
    reductions_through_views(b.graph)
    reductions_through_views(b3.graph)
    assert kept.producer.args[0] is view and split.producer.args[0] is view3


def test_reductions_over_size_one_dims_are_the_identity():
    b, x = _builder()
    s = b.op("sum", [x], dims=(1,), keepdim=True)
    again = b.op("amax", [s], dims=(1,), keepdim=True)
    mean = b.op("mean", [again], dims=(1,), keepdim=True)
    b.graph.outputs = [mean]
    the_plan = plan(b.graph)
    assert kinds(the_plan) == [("row", ["sum", "identity", "identity"])]


def test_a_pointwise_producer_of_a_pool_runs_in_its_window_loop():
    b = GraphBuilder()
    x = b.input("x", 0, torch.randn(2, 3, 8, 8))
    y = b.input("y", 1, torch.randn(2, 3, 6, 6))
    act = b.op("relu", [b.op("add", [x, 1.0])])
    pooled = b.op("max_pool", [act], kernel=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False)
    kept = b.op("avg_pool", [b.op("sigmoid", [y])], kernel=(2, 2), stride=(2, 2), padding=(0, 0), ceil_mode=False,
                count_include_pad=True, divisor_override=None)
    b.graph.outputs = [pooled, kept, act]  # act is an output too: it must be written, so no prologue there
    the_plan = plan(b.graph)
    pools = [g for g in the_plan.groups if g.kind == "pool"]
    assert [g.prologue is not None for g in pools] == [False, True]
    assert [op.name for op in pools[1].prologue.ops] == ["sigmoid"]
    assert [g.index for g in the_plan.steps] == list(range(len(the_plan.steps)))
