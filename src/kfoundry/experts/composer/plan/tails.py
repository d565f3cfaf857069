"""A costly pointwise tail of a GEMM or convolution moved past the view that feeds a norm, into the norm's row kernel.

A convolution's epilogue ending in erf-GELU, tanh, SiLU or another costly function before a GroupNorm is
compute-bound: the function's instructions outweigh the tile's main loop where the reduction is short (a 3x3
transposed conv of 32 channels). The norm's row kernel after it is memory-bound, with issue slots to spare: with
the tail rewritten to act on the norm's view (f(view(x)) = view(f(x)) for a function of one element), the product's
kernel writes x and the row kernel computes f on each read. A fusion boundary the genome moves (plan switch
TAIL_IN_ROW): which side pays more depends on the GPU, so both are measured.
"""

from __future__ import annotations

from kfoundry.experts.composer.ir.builder import infer
from kfoundry.experts.composer.ir.graph import (
    BINARY,
    COMPARISONS,
    RESHAPES,
    SHAPE_QUERIES,
    TENSOR,
    UNARY,
    Graph,
    Op,
    Value,
    category,
)

# functions of many instructions an element (a polynomial, an exponential): worth moving out of a product's epilogue
COSTLY = frozenset({"gelu", "erf", "tanh", "sigmoid", "silu", "mish", "softplus", "elu", "selu", "logsigmoid",
                    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos"})
ONE_ELEMENT = (UNARY | BINARY) - COMPARISONS - {"cast"}  # with one tensor argument: the dtype is kept


def raised_tails(graph: Graph) -> int:
    """Rewrites view(f_1(...f_k(x))) as f_1(...f_k(view(x))) where the view's result feeds a reduction, each f_i is
    a function of one element (and numbers) only the next one reads, one of them is COSTLY, and x comes from a GEMM
    or a convolution (through pointwise ops). Returns how many views it moved."""
    moved = 0
    while True:
        found = _next_tail(graph)
        if found is None:
            return moved
        _raise(graph, *found)
        moved += 1


def _next_tail(graph: Graph) -> tuple[Op, list[Op]] | None:
    users = graph.data_users()
    for view in graph.ops:
        if view.name not in RESHAPES or not _feeds_reduction(view.out, users):
            continue
        chain: list[Op] = []  # the tail, from the op the view reads upwards
        value = view.args[0]
        while _one_element(value.producer) and value not in graph.outputs and \
                users.get(value) == [chain[-1] if chain else view]:
            chain.append(value.producer)
            value = value.producer.tensor_args[0]
        if chain and any(op.name in COSTLY for op in chain) and _after_product(value):
            return view, chain
    return None


def _one_element(op: Op | None) -> bool:
    """A function of one tensor element and numbers (GELU, x * 2.0), its dtype kept."""
    return op is not None and op.name in ONE_ELEMENT and len(op.tensor_args) == 1


def _feeds_reduction(value: Value, users: dict[Value, list[Op]]) -> bool:
    for user in users.get(value, []):
        if category(user.name) == "reduction" or _one_element(user) and _feeds_reduction(user.out, users):
            return True
    return False


def _after_product(value: Value, depth: int = 8) -> bool:
    """Whether a GEMM or convolution computes `value`, through pointwise ops and views."""
    op = value.producer
    if op is None or depth == 0:
        return False
    kind = category(op.name)
    if kind in ("gemm", "conv"):
        return True
    return kind in ("pointwise", "view") and any(_after_product(a, depth - 1) for a in op.tensor_args)


def _raise(graph: Graph, view: Op, chain: list[Op]) -> None:
    source = chain[-1].tensor_args[0]
    viewed = Value(f"{view.out.name}_pre", TENSOR, view.out.shape, source.dtype, source.fixed_dtype)
    added = [Op(view.name, [source, *view.args[1:]], dict(view.attrs), viewed, view.origin)]
    viewed.producer = added[0]
    current = viewed
    for op in reversed(chain):
        args = [current if a is op.tensor_args[0] else a for a in op.args]
        if op is chain[0]:
            out = view.out  # what reads the view reads the tail's last result
        else:
            shape, dtype, fixed = infer(op.name, args, op.attrs)
            out = Value(f"{op.out.name}_viewed", TENSOR, shape, dtype, fixed)
        moved = Op(op.name, args, dict(op.attrs), out, op.origin)
        out.producer = moved
        added.append(moved)
        current = out
    gone = {op.out for op in chain}
    for op in graph.ops:  # a size query of a tail value asks the same of its source (one-element functions)
        if op.name in SHAPE_QUERIES:
            op.args = [source if isinstance(a, Value) and a in gone else a for a in op.args]
    index = graph.ops.index(view)
    graph.ops[index:index + 1] = added
    graph.ops = [op for op in graph.ops if op not in chain]
