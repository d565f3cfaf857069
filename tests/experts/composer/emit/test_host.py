"""Host-side code: attribute paths, shape formulas that follow the inputs, dtypes that follow the precision."""

import torch
from torch import nn

from kfoundry.experts.composer.emit.host import (
    HostContext,
    attribute_expr,
    conv_size_expr,
    product,
)
from kfoundry.experts.composer.ir.builder import GraphBuilder
from kfoundry.experts.composer.plan.fusion import plan


def test_attribute_paths_index_containers():
    model = nn.Module()
    model.layers = nn.ModuleList([nn.Linear(2, 2)])
    model.blocks = nn.ModuleDict({"a b": nn.Linear(2, 2)})
    model.seq = nn.Sequential(nn.Linear(2, 2))
    assert attribute_expr("self", "layers.0.weight", model) == "self.layers[0].weight"
    assert attribute_expr("self", "blocks.a b.bias", model) == "self.blocks['a b'].bias"
    assert attribute_expr("self", "seq.0.weight", model) == "self.seq[0].weight"
    assert attribute_expr("self", "weight", None) == "self.weight"


def test_size_expressions_evaluate_like_pytorch():
    for size in (7, 8, 13):
        for k, s, p, d in ((3, 1, 1, 1), (3, 2, 0, 1), (5, 3, 2, 2)):
            expected = (size + 2 * p - d * (k - 1) - 1) // s + 1
            assert eval(conv_size_expr("n", k, s, p, d, False), {"n": size}) == expected
            expected_t = (size - 1) * s - 2 * p + d * (k - 1) + 1 + 1
            assert eval(conv_size_expr("n", k, s, p, d, True, 1), {"n": size}) == expected_t
    assert product(["a", "1", "b + 1"]) == "a * (b + 1)" and product([]) == "1"


def test_formulas_names_dtypes_and_views():
    b = GraphBuilder()
    x = b.input("x", 0, torch.randn(2, 3, 4))
    w = b.param("fc.weight", torch.randn(5, 4))
    n = b.sym("sym_size", [x], 2, dim=0)
    flat = b.op("reshape", [x], sizes=(n, -1))
    wt = b.op("transpose", [w], dim0=0, dim1=1)
    y = b.op("matmul", [x, wt])
    s = b.op("sum", [y], dims=(1,), keepdim=False)
    half = b.op("cast", [s], dtype=torch.float16)
    b.graph.outputs = [flat, half]
    host = HostContext(plan(b.graph))
    assert host.formula(y) == ["x.shape[0]", "x.shape[1]", "fc_weight.shape[0]"]
    assert host.formula(s) == ["x.shape[0]", "fc_weight.shape[0]"]
    assert host.formula(flat) == [host.name(n), "x.numel() // " + host.name(n)]
    assert host.dtype(y) == "x.dtype" and host.dtype(half) == "torch.float16"
    assert host.device() == "x.device"
    assert host.sym_line(n.producer) == f"{host.name(n)} = x.shape[0]"
    assert host.view_line(flat.producer) == f"{host.name(flat)} = x.reshape({host.name(n)}, -1)"
    assert host.view_line(wt.producer).endswith("fc_weight.transpose(0, 1)")
    assert host.shape_tuple(y) == "(x.shape[0], x.shape[1], fc_weight.shape[0])"
    assert host.fresh("x") != "x" and host.fresh("sum") != "sum"  # inputs and builtins are taken
