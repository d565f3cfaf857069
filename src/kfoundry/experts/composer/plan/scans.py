"""Reversed and exclusive scans, recognized in the graph before planning so that each is one scan kernel.

PyTorch has neither: a model writes a reversed cumulative sum as flip(cumsum(flip(x))), and an exclusive one as
the inclusive one shifted by one along the dim with the identity in front, cat([ones_like(s[:, :1]), s[:, :-1]]).
Written that way they cost a flip kernel on each side, or a fill and a concatenation after the scan; as flags of
the scan (attrs "reverse", "exclusive") the scan kernel reads and writes at the moved coordinates itself.
"""

from __future__ import annotations

from kfoundry.experts.composer.ir.graph import INDEX, POINTWISE, SCANS, Graph, Op, Value, dead_code_eliminated


def identity_of(scan: Op) -> float:
    return 1.0 if scan.name == "cumprod" else 0.0


def directed_scans(graph: Graph) -> Graph:
    changed = True
    while changed:
        changed = _exclusive(graph) or _reversed(graph)
        graph = dead_code_eliminated(graph)
    return graph


def _replace(graph: Graph, old: Value, new: Value) -> None:
    for op in graph.ops:
        op.args = [new if a is old else a for a in op.args]
    graph.outputs = [new if v is old else v for v in graph.outputs]


def _flip_along(value: Value, dim: int) -> Op | None:
    op = value.producer
    return op if op is not None and op.name == "flip" and tuple(op.attrs["dims"]) == (dim,) else None


def _unflips(value: Value, dim: int, users: dict[Value, list[Op]]) -> list[tuple[Op, int]] | None:
    """Where `value` is pointwise ops (only it uses each) of tensors flipped along `dim` or constant along it:
    the (op, argument position) of every flipped tensor, whose flip the ops may skip if their result is flipped
    instead. None where some tensor is neither."""
    op = value.producer
    if op is None or op.name not in POINTWISE or op.name in INDEX or len(users.get(value, [])) != 1:
        return None
    found: list[tuple[Op, int]] = []
    for position, arg in enumerate(op.args):
        if not (isinstance(arg, Value) and arg.is_tensor):
            continue
        own = dim - (value.rank - arg.rank)  # the arg's dim that broadcasts along `dim`
        if own < 0 or arg.shape[own] == 1:
            continue
        flip = _flip_along(arg, own)
        if flip is not None and users.get(arg) == [op]:
            found.append((op, position))
            continue
        inner = _unflips(arg, own, users)
        if inner is None:
            return None
        found += inner
    return found


def _reversed(graph: Graph) -> bool:
    """flip(scan(flip(x))) along the scan's dim, or with pointwise ops of flipped tensors in place of flip(x):
    the scan, reversed (pointwise ops commute with a flip)."""
    users = graph.data_users()
    for outer in graph.ops:
        if outer.name != "flip" or len(outer.attrs["dims"]) != 1:
            continue
        scan = outer.args[0].producer
        if scan is None or scan.name not in SCANS or users.get(scan.out) != [outer] or scan.out in graph.outputs:
            continue
        dim = scan.attrs["dim"]
        if tuple(outer.attrs["dims"]) != (dim,):
            continue
        inner = _flip_along(scan.args[0], dim)
        if inner is not None and users.get(inner.out) == [scan]:
            scan.args = [inner.args[0]]
        else:
            flipped = _unflips(scan.args[0], dim, users)
            if not flipped:
                continue
            for op, position in flipped:
                op.args[position] = op.args[position].producer.args[0]
        scan.attrs["reverse"] = not scan.attrs.get("reverse", False)
        _replace(graph, outer.out, scan.out)
        return True
    return False


def _exclusive(graph: Graph) -> bool:
    """cat([fill of the identity, 1 along dim], scan[..., :-1]) along the scan's dim: the scan, exclusive."""
    for index, cat in enumerate(graph.ops):
        if cat.name != "cat" or len(cat.args) != 2:
            continue
        dim = cat.attrs["dim"]
        fill, shifted = cat.args
        view = shifted.producer
        if view is None or view.name != "slice" or view.attrs["dim"] != dim:
            continue
        scan = view.args[0].producer
        if scan is None or scan.name not in SCANS or scan.attrs["dim"] != dim or scan.attrs.get("exclusive"):
            continue
        length = scan.out.shape[dim]
        stop = view.attrs["stop"]
        if view.attrs["start"] not in (None, 0) or view.attrs["step"] not in (None, 1) or \
                stop not in (-1, length - 1) or cat.out.shape != scan.out.shape:
            continue
        if fill.producer is None or fill.producer.name != "full" or fill.shape[dim] != 1 or \
                float(fill.producer.attrs["value"]) != identity_of(scan):
            continue
        out = Value(f"{scan.out.name}_exclusive", scan.out.kind, scan.out.shape, scan.out.dtype, scan.out.fixed_dtype)
        exclusive = Op(scan.name, list(scan.args), dict(scan.attrs, exclusive=True), out, cat.origin)
        out.producer = exclusive
        graph.ops.insert(index, exclusive)
        _replace(graph, cat.out, out)
        return True
    return False
