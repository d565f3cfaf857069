"""The IR's values, ops, categories and dead-code elimination."""

import pytest
import torch

from kfoundry.experts.composer.ir.builder import GraphBuilder
from kfoundry.experts.composer.ir.graph import (
    ALL_OPS,
    Graph,
    category,
    dead_code_eliminated,
    flat_values,
)


def test_every_op_has_one_category():
    for name in ALL_OPS:
        assert category(name) in ("pointwise", "reduction", "gemm", "conv", "pool", "scan", "layout", "recurrent",
                                  "view", "sym")
    with pytest.raises(KeyError):
        category("fft")


def test_values_ops_and_users():
    b = GraphBuilder()
    x = b.input("x", 0, torch.randn(4, 8))
    k = b.input("k", 1, 3)
    w = b.param("fc.weight", torch.randn(8))
    y = b.op("mul", [x, w])
    n = b.sym("sym_size", [x], 4, dim=0)
    z = b.op("reshape", [y], sizes=(n, -1))
    assert x.is_tensor and x.rank == 2 and x.is_float and not k.is_tensor and k.concrete == 3
    assert w.path == "fc.weight" and b.param("fc.weight", torch.randn(8)) is w  # one value per attribute path
    assert z.producer.inputs == [y, n]  # sizes among the attributes count as inputs
    users = b.graph.users()
    assert users[y] == [z.producer] and users[n] == [z.producer]
    assert flat_values([x, (3, [y, 2.0]), None]) == [x, y]
    assert "reshape" in repr(z.producer) and repr(x) == "%x[4, 8]"


def test_dead_code_elimination_keeps_what_outputs_need():
    b = GraphBuilder()
    x = b.input("x", 0, torch.randn(4, 8))
    used = b.op("relu", [x])
    b.op("exp", [x])  # nobody reads it
    size = b.sym("sym_size", [x], 4, dim=0)
    out = b.op("reshape", [used], sizes=(size, -1))
    b.graph.outputs = [out]
    graph = dead_code_eliminated(b.graph)
    assert [op.name for op in graph.ops] == ["relu", "sym_size", "reshape"]
    assert "outputs" in graph.dump()


def test_empty_graph():
    graph = Graph()
    assert dead_code_eliminated(graph).ops == [] and graph.users() == {}
