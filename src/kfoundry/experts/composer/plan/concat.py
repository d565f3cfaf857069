"""Concatenations of computed tensors, before planning: the pointwise ops after a concatenation move onto its
parts (relu(cat([a, b])) = cat([relu(a), relu(b)])), so that they join the kernels computing the parts, and the
planner can then have those kernels write their results straight into the concatenation (`Planner._placed`)."""

from __future__ import annotations

from kfoundry.experts.composer.ir.builder import infer
from kfoundry.experts.composer.ir.graph import (
    INDEX,
    INPUT,
    PARAM,
    POINTWISE,
    TENSOR,
    Graph,
    Op,
    Value,
    category,
    dead_code_eliminated,
)


def computed(value: Value) -> bool:
    """Made by a kernel (not an input, a parameter or a view of one)."""
    return value.kind not in (INPUT, PARAM) and value.producer is not None and \
        category(value.producer.name) not in ("view", "sym")


def sink_through_cats(graph: Graph) -> Graph:
    changed = True
    while changed:
        changed = _sink_one(graph)
    return dead_code_eliminated(graph)


def _sink_one(graph: Graph) -> bool:
    users = graph.data_users()
    for index, op in enumerate(graph.ops):
        if op.name not in POINTWISE or op.name in INDEX:
            continue
        cat = next((a.producer for a in op.tensor_args if a.producer is not None and a.producer.name == "cat"), None)
        if cat is None or users.get(cat.out) != [op] or cat.out in graph.outputs or op.out.shape != cat.out.shape:
            continue
        if not all(computed(part) for part in cat.args):
            continue  # parts in memory already: the concatenation kernel reads them once, with op fused
        dim = cat.attrs["dim"]
        others = [a for a in op.tensor_args if a is not cat.out]
        if any(a.shape[dim - (op.out.rank - a.rank)] != 1 for a in others if dim - (op.out.rank - a.rank) >= 0):
            continue  # an argument that varies along the concatenated dim would have to be cut too
        added: list[Op] = []
        parts: list[Value] = []
        for k, part in enumerate(cat.args):
            args = [part if a is cat.out else a for a in op.args]
            shape, dtype, fixed = infer(op.name, args, op.attrs)
            out = Value(f"{op.out.name}_part{k}", TENSOR, shape, dtype, fixed)
            out.producer = Op(op.name, args, dict(op.attrs), out, op.origin)
            added.append(out.producer)
            parts.append(out)
        joined = Op("cat", parts, {"dim": dim}, op.out, cat.origin)
        op.out.producer = joined
        graph.ops[index:index + 1] = added + [joined]
        return True
    return False
