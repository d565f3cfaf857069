"""Fusion planning: the IR graph cut into kernels (groups) and host steps (views, sizes).

A group is one kernel over an index *space* (a shape). Every value computed in it has a *map*: for each of its
dims, the space dim it runs along (None for a broadcast dim of size 1). Kinds:

* ``pointwise``: a chain of pointwise ops, one flat kernel over the space, with broadcasting;
* ``row``: pointwise ops and reductions over the same space dims (``reduced``): softmax, the norms,
  hand-written RMSNorm, logsumexp, argmax ... in one kernel whose programs own rows of the outer dims;
* ``gemm``, ``conv``, ``pool``: an anchor op whose output is the space, with the pointwise ops after it
  fused into its epilogue; GEMMs and convolutions also take reductions over their output features / channels
  (softmax, sum, logsumexp after a Linear or a convolution) when one tile spans them.

Ops join the latest group one of their arguments lives in when the data allow (the shapes map into the
space, every other argument is ready before the group runs); otherwise they start a group. Values used
outside their group, or returned, are exported (written to memory). The groups, host steps and plan it makes
are plan/steps.py's, which the emitters and templates read.
"""

from __future__ import annotations

import torch

from kfoundry.experts.composer.ir.builder import aligned, infer, norm_dims
from kfoundry.experts.composer.ir.graph import (
    CONST,
    INDEX,
    INPUT,
    PARAM,
    POINTWISE,
    RESHAPES,
    SYM,
    TENSOR,
    Graph,
    Op,
    Value,
    category,
    dead_code_eliminated,
    moved_dims,
)
from kfoundry.experts.composer.plan.concat import computed, sink_through_cats
from kfoundry.experts.composer.plan.scans import directed_scans
from kfoundry.experts.composer.plan.sizes import SameSizes
from kfoundry.experts.composer.plan.steps import Group, HostStep, Map, Plan, name_groups
from kfoundry.experts.composer.plan.tails import raised_tails

SEALED = ("scan", "recurrent")  # kernels nothing fuses into
TILE_REDUCTION_MAX = 512  # widest output-channel extent a GEMM / convolution epilogue reduces in one tile


def tile_dim(group: Group) -> int:
    """The space dim a GEMM / convolution tile's columns run along (output features / channels)."""
    return 1 if group.kind == "conv" else len(group.space) - 1


def view_root(value: Value) -> Value:
    """The value a chain of views shows."""
    while value.producer is not None and category(value.producer.name) == "view":
        value = value.producer.args[0]
    return value


def own_map(value: Value) -> Map:
    """The map of a value whose dims are the space's own (None where a dim has size 1)."""
    return tuple(None if s == 1 else i for i, s in enumerate(value.shape))


def leaf_map_for(arg: Value, out: Value, out_map: Map) -> Map:
    return tuple(out_map[j] if arg.shape[i] != 1 else None for i, j in enumerate(aligned(arg.rank, out.rank)))


def _indices_before_use(ops: list[Op]) -> list[Op]:
    """The ops with each index op (iota: it needs only a shape) moved to just before its first user."""
    moved = {op.out: op for op in ops if op.name in INDEX}
    order: list[Op] = []
    for op in ops:
        if op.out in moved:
            continue
        for arg in op.tensor_args:
            if arg in moved:
                order.append(moved.pop(arg))
        order.append(op)
    return order + list(moved.values())


class Planner:
    """`tile_reductions`: a reduction over a GEMM's output features (a conv's channels) joins its epilogue where one
    tile spans them; off, it runs in a row kernel of its own (a fusion boundary the genome may move)."""

    def __init__(self, graph: Graph, tile_reductions: bool = True) -> None:
        self.graph = graph
        self.tile_reductions = tile_reductions
        self.steps: list[Group | HostStep] = []
        self.group_of: dict[Value, Group] = {}
        self.position: dict[Value, int] = {}  # when a value is in memory (-1: from the start)
        for v in graph.inputs:
            self.position[v] = -1
        for v in graph.params.values():
            self.position[v] = -1
        self.sizes = SameSizes(graph)

    def plan(self) -> Plan:
        for op in _indices_before_use(self.graph.ops):
            kind = category(op.name)
            if kind == "sym":
                self.position[op.out] = -1  # sizes are computed from shapes at the top of forward
                self.steps.append(HostStep(op, len(self.steps)))
            elif kind == "view":
                # a view is ready as soon as the tensor it views is: views of inputs and parameters from the start
                self.steps.append(HostStep(op, len(self.steps)))
                self.position[op.out] = self._ready_at(op.args[0])
            elif kind in ("gemm", "conv", "pool", "scan", "recurrent"):
                self._anchor(op, kind)
            elif kind == "layout" and self._placeable(op):
                self._place(op)
            elif kind == "layout":
                self._layout(op)
            elif kind == "reduction":
                self._reduction(op)
            else:
                self._pointwise(op)
        self._exports()
        self._prologues()
        name_groups(self.steps)
        return Plan(self.graph, self.steps)

    def groups(self) -> list[Group]:
        return [s for s in self.steps if isinstance(s, Group)]

    # -- helpers ---------------------------------------------------------------------------------------
    def _ready_at(self, value: Value) -> int:
        if value.kind in (INPUT, PARAM, SYM, CONST):
            return -1
        if value in self.group_of:
            return self.group_of[value].index
        return self.position.get(value, len(self.steps))

    def _ready_before(self, value: Value, index: int) -> bool:
        return self._ready_at(value) < index

    def _new_group(self, kind: str, shaped: Value, **kw) -> Group:
        group = Group(kind, len(self.steps), tuple(shaped.shape), shaped=shaped, **kw)
        self.steps.append(group)
        return group

    def _add(self, group: Group, op: Op, out_map: Map, input_map: Map | None = None) -> None:
        """Put op in the group; a reduction reads its input through `input_map` (the input's own dims)."""
        out_map = tuple(None if op.out.shape[i] == 1 else d for i, d in enumerate(out_map))
        for position, arg in enumerate(op.args):
            if isinstance(arg, Value) and arg.is_tensor and arg not in group.vmap:
                if input_map is not None and position == 0:
                    group.leaf_maps[(id(op), position)] = tuple(
                        None if arg.shape[i] == 1 else d for i, d in enumerate(input_map))
                else:
                    group.leaf_maps[(id(op), position)] = leaf_map_for(arg, op.out, out_map)
        group.ops.append(op)
        group.vmap[op.out] = out_map
        self.group_of[op.out] = group

    def _candidates(self, op: Op) -> list[Group]:
        found = []
        for arg in op.tensor_args:
            group = self.group_of.get(arg)
            if group is not None and group not in found:
                found.append(group)
        return sorted(found, key=lambda g: -g.index)

    # -- anchors ---------------------------------------------------------------------------------------
    def _anchor(self, op: Op, kind: str) -> None:
        group = self._new_group(kind, op.out, anchor=op)
        group.vmap[op.out] = own_map(op.out)
        self.group_of[op.out] = group

    def _placeable(self, op: Op) -> bool:
        """A concatenation of distinct tensors that kernels compute and nothing else reads."""
        if op.name != "cat" or len(set(op.args)) != len(op.args):
            return False
        users = self.graph.data_users()
        return all(computed(part) and part in self.group_of and part not in self.graph.outputs
                   and users.get(part) == [op] for part in op.args)

    def _place(self, op: Op) -> None:
        """The kernels computing the parts write them into slices of the concatenation (a host step allocates it
        and hands each kernel its slice): no kernel copies them."""
        self.steps.append(HostStep(op, len(self.steps)))
        self.position[op.out] = max(self.group_of[part].index for part in op.args)
        for part in op.args:
            part.placed_dim = op.attrs["dim"]

    def _layout(self, op: Op) -> None:
        """A flip, roll, pad or cat starts a pointwise kernel over its output: its inputs are read from memory at the
        moved coordinates (they are never values of the same kernel), what follows it joins as usual."""
        group = self._new_group("pointwise", op.out)
        self._add(group, op, tuple(range(op.out.rank)))
        moved = set(moved_dims(op))
        for position, arg in enumerate(op.args):
            if isinstance(arg, Value) and arg.is_tensor:
                group.leaf_maps[(id(op), position)] = tuple(
                    None if i in moved or arg.shape[i] == 1 else i for i in range(arg.rank))

    # -- pointwise -------------------------------------------------------------------------------------
    def _pointwise(self, op: Op) -> None:
        # a scan or recurrent kernel writes its result and nothing else: what follows it reads that from memory
        candidates = [g for g in self._candidates(op) if g.kind not in SEALED][:1]
        if not candidates and op.name not in INDEX:
            # reads only tensors in memory: compute it beside a recent kernel of the same space (an index reads
            # nothing: it starts a kernel beside its first user, which may need values that kernel cannot see)
            candidates = [g for g in reversed(self.groups()) if g.kind not in SEALED and (
                self.sizes.same_shape(g.shaped, op.out)
                or g.kind == "pointwise" and self.sizes.broadcasts_into(g.shaped, op.out))][:3]
        elif not candidates and self.groups():
            # a second index op beside a first that started a kernel of its own (a triangle's row and column):
            # the same kernel, or the first would be written to memory for the second's user to read
            last = self.groups()[-1]
            if last.kind == "pointwise" and self.sizes.same_shape(last.shaped, op.out) and \
                    all(o.name in INDEX for o in last.ops):
                candidates = [last]
        for group in candidates:
            if not all(self._ready_before(a, group.index) for a in op.inputs if a not in group.vmap):
                continue
            out_map = self._fit(group, op)
            if out_map is None and group.kind == "pointwise":
                out_map = self._grow(group, op)
            if out_map is not None:
                self._add(group, op, out_map)
                return
        group = self._new_group("pointwise", op.out)
        self._add(group, op, tuple(range(op.out.rank)))

    def _fit(self, group: Group, op: Op) -> Map | None:
        """The map of op's result in the group's space, or None when it does not fit."""
        out = op.out
        mapped: list = [None] * out.rank
        defined = [False] * out.rank
        for arg in op.tensor_args:
            if arg not in group.vmap:
                continue
            arg_map = group.vmap[arg]
            for i, j in enumerate(aligned(arg.rank, out.rank)):
                if arg.shape[i] == 1:
                    continue
                if defined[j] and mapped[j] != arg_map[i]:
                    return None
                mapped[j], defined[j] = arg_map[i], True
        offset = len(group.space) - out.rank
        for j in range(out.rank):
            if defined[j] or out.shape[j] == 1:
                continue
            # a dim only leaves run along: it must be the space dim in the same right-aligned place
            if offset < 0 or not self.sizes.same(group.shaped, j + offset, out, j) or (j + offset) in mapped:
                return None
            if any(defined[k] and mapped[k] != k + offset for k in range(out.rank)):
                return None
            mapped[j] = j + offset
        if group.anchor is not None and any(m is None and out.shape[j] != 1 for j, m in enumerate(mapped)):
            return None
        return tuple(mapped)

    def _grow(self, group: Group, op: Op) -> Map | None:
        """Widen a pointwise group's space to op's (larger) broadcast shape, when its values line up right-aligned."""
        out = op.out
        offset = out.rank - len(group.space)
        if not self.sizes.broadcasts_into(group.shaped, out):
            return None
        group.space, group.shaped = tuple(out.shape), out
        group.vmap = {v: tuple(None if d is None else d + offset for d in m) for v, m in group.vmap.items()}
        group.leaf_maps = {k: tuple(None if d is None else d + offset for d in m) for k, m in group.leaf_maps.items()}
        return self._fit(group, op)

    # -- reductions ------------------------------------------------------------------------------------
    def _reduction(self, op: Op) -> None:
        x = op.args[0]
        dims = (op.attrs["dim"],) if op.name in ("argmax", "argmin") else op.attrs["dims"]
        dims = norm_dims(dims, x.rank)
        group = self.group_of.get(x)
        if group is not None and group.anchor is not None and self._along_tile(group, op, x, dims):
            group.reduced = (tile_dim(group),)
            self._add(group, op, self._reduced_map(group.vmap[x], dims, op.attrs.get("keepdim", False)))
            return
        if group is not None and group.anchor is None and not group.moves:
            x_map = group.vmap[x]
            space_dims = {x_map[d] for d in dims if x.shape[d] != 1}
            reduced = {d for d in group.reduced if group.space[d] != 1}
            fits = (None not in space_dims and space_dims
                    and (reduced == space_dims if group.reduced else True)
                    and (op.name not in ("argmax", "argmin") or len(space_dims) == 1)
                    and all(self._ready_before(a, group.index) for a in op.inputs if a not in group.vmap))
            if fits:
                if not group.reduced:
                    group.kind, group.reduced = "row", tuple(sorted(space_dims))
                self._add(group, op, self._reduced_map(x_map, dims, op.attrs.get("keepdim", False)))
                return
        identity = tuple(range(x.rank))
        wanted = {d for d in dims if x.shape[d] != 1}
        for group in [g for g in reversed(self.groups()) if g.kind == "row" and self.sizes.same_shape(g.shaped, x)][:3]:
            # a sibling reduction of the same tensor over the same dims: one kernel computes both
            same = {d for d in group.reduced if group.space[d] != 1} == wanted
            if same and wanted and self._ready_before(x, group.index) and \
                    (op.name not in ("argmax", "argmin") or len(wanted) == 1):
                self._add(group, op, self._reduced_map(identity, dims, op.attrs.get("keepdim", False)), identity)
                return
        group = self._new_group("row", x, reduced=dims)
        self._add(group, op, self._reduced_map(identity, dims, op.attrs.get("keepdim", False)), identity)

    def _along_tile(self, group: Group, op: Op, x: Value, dims: tuple[int, ...]) -> bool:
        """A reduction in a GEMM / convolution epilogue: over the output-channel dim only, small enough that one
        tile holds all of it, and every other argument ready."""
        if not self.tile_reductions or group.kind not in ("gemm", "conv") or \
                (group.kind == "conv" and group.anchor.attrs["groups"] != 1):
            return False
        n_dim = tile_dim(group)
        space_dims = {group.vmap[x][d] for d in dims if x.shape[d] != 1}
        return (space_dims == {n_dim} and group.space[n_dim] <= TILE_REDUCTION_MAX
                and all(self._ready_before(a, group.index) for a in op.inputs if a not in group.vmap))

    @staticmethod
    def _reduced_map(x_map: Map, dims: tuple[int, ...], keepdim: bool) -> Map:
        if keepdim:
            return tuple(None if i in dims else m for i, m in enumerate(x_map))
        return tuple(m for i, m in enumerate(x_map) if i not in dims)

    def _prologues(self) -> None:
        """A pointwise kernel whose only product feeds one pooling or scan kernel runs inside that kernel's loop
        instead (ReLU before MaxPool, the mask before a cumulative sum: the product is never written)."""
        users = self.graph.users()
        for group in self.groups():
            if group.kind not in ("pool", "scan"):
                continue
            x = group.anchor.args[0]
            producer = self.group_of.get(x)
            if (producer is None or producer.kind != "pointwise" or producer.moves or x not in producer.exports
                    or producer.space != x.shape or x in self.graph.outputs
                    or any(user is not group.anchor for user in users.get(x, []))
                    or group.vmap.get(x) is not None):
                continue
            if producer.exports == [x]:
                group.prologue = producer
                producer.exports = []
                self.steps.remove(producer)
            else:  # the kernel also computes other products: take out the ops only x needs, if they are apart
                group.prologue = _split_off(producer, x)
        for index, step in enumerate(self.steps):
            step.index = index

    # -- exports ---------------------------------------------------------------------------------------
    def _exports(self) -> None:
        needed: list[Value] = list(self.graph.outputs)
        for op in self.graph.ops:
            consumer = self.group_of.get(op.out) if category(op.name) not in ("sym", "view") else None
            for value in op.inputs:
                owner = self.group_of.get(value)
                if owner is None:
                    continue
                if consumer is not owner or op is owner.anchor or consumer.anchor is not None and op is consumer.anchor:
                    needed.append(value)
        for value in needed:
            owner = self.group_of.get(value)
            if owner is not None and value not in owner.exports:
                owner.exports.append(value)


def computing(group: Group, values: list[Value], known: frozenset = frozenset()) -> set[Op]:
    """The group's ops that compute `values`, stopping at the `known` values (read from memory instead)."""
    found: set[Op] = set()
    pending = list(values)
    while pending:
        v = pending.pop()
        op = v.producer
        if op is None or v not in group.vmap or v in known or op in found:
            continue
        found.add(op)
        pending += [a for a in op.inputs if a in group.vmap]
    return found


def _split_off(group: Group, value: Value) -> Group | None:
    """A pointwise group of the ops that compute `value` and nothing else the group exports, taken out of it;
    None when they share ops with another export."""
    mine = computing(group, [value])
    others = computing(group, [v for v in group.exports if v is not value])
    if mine & others:
        return None
    split = Group("pointwise", -1, group.space, shaped=group.shaped)
    for op in group.ops:
        if op in mine:
            split.ops.append(op)
            split.vmap[op.out] = group.vmap.pop(op.out)
            for key in [k for k in group.leaf_maps if k[0] == id(op)]:
                split.leaf_maps[key] = group.leaf_maps.pop(key)
    group.ops = [op for op in group.ops if op not in mine]
    group.exports.remove(value)
    return split


def sink_views(graph: Graph) -> Graph:
    """Move views below the pointwise ops that read them (f(view(v), w) = view(f(v, w')), so that the ops join
    the kernel that computes v: GroupNorm's view back to (N, C, H, W) no longer splits it from the activation
    or the residual add after it. Other tensor arguments must have the view's shape and the view must only
    regroup dims; they are then read through the inverse view w' (a host-side reshape)."""
    regrouped_values: set[Value] = set()  # the inverse views made here are never sunk again
    changed = True
    while changed:
        changed = False
        for index, op in enumerate(graph.ops):
            if op.name not in POINTWISE:
                continue
            viewed = next((a for a in op.tensor_args if a not in regrouped_values and _sinkable(a)), None)
            if viewed is None:
                continue
            view, source = viewed.producer, viewed.producer.args[0]
            others = [a for a in dict.fromkeys(op.tensor_args) if a is not viewed]
            if others and (view.name not in RESHAPES or any(o.shape != viewed.shape for o in others)):
                continue
            added: list[Op] = []
            renamed: dict[Value, Value] = {viewed: source}
            for other in list(others):
                # another regrouping of a tensor shaped like `source` (x * sigmoid(x) after both moved): its own
                # source lines up with `source` element for element
                inner = other.producer
                if inner is not None and inner.name in RESHAPES and view.name in RESHAPES and \
                        inner.args[0].shape == source.shape:
                    renamed[other] = inner.args[0]
                    others.remove(other)
            if others:
                sizes = []
                for d, extent in enumerate(source.shape):
                    size = Value(f"{source.name}_size{d}", SYM, dtype=torch.int64, fixed_dtype=True, concrete=extent)
                    size.producer = Op("sym_size", [source], {"dim": d}, size, view.origin)
                    added.append(size.producer)
                    sizes.append(size)
                for other in others:
                    regrouped = Value(f"{other.name}_regrouped", TENSOR, source.shape, other.dtype, other.fixed_dtype)
                    regrouped.producer = Op("reshape", [other], {"sizes": tuple(sizes)}, regrouped, view.origin)
                    added.append(regrouped.producer)
                    renamed[other] = regrouped
                    regrouped_values.add(regrouped)
            args = [renamed.get(a, a) if isinstance(a, Value) else a for a in op.args]
            shape, dtype, fixed = infer(op.name, args, op.attrs)
            inner = Value(f"{op.out.name}_pre", TENSOR, shape, dtype, fixed)
            moved = Op(op.name, args, dict(op.attrs), inner, op.origin)
            inner.producer = moved
            out = op.out
            reviewed = Op(view.name, [inner], dict(view.attrs), out, view.origin)
            out.producer = reviewed
            graph.ops[index:index + 1] = added + [moved, reviewed]
            changed = True
            break
    return dead_code_eliminated(graph)


def _sinkable(value: Value) -> bool:
    """A view (of views) of a value some kernel computes."""
    view = value.producer
    if view is None or category(view.name) != "view":
        return False
    root = view.args[0]
    while root.producer is not None and category(root.producer.name) == "view":
        root = root.producer.args[0]
    return root.producer is not None and category(root.producer.name) != "sym"


def trivial_reductions(graph: Graph) -> Graph:
    """Sums, means, maxima and minima over dims of size 1 that keep them are the identity (a chain of them
    after `sum(..., keepdim=True)` then stays in one kernel)."""
    for op in graph.ops:
        if op.name in ("sum", "amax", "amin", "mean") and op.attrs.get("keepdim") and not op.attrs.get("correction"):
            x = op.args[0]
            if x.is_float and all(x.shape[d] == 1 for d in norm_dims(op.attrs["dims"], x.rank)):
                op.name, op.args, op.attrs = "identity", [x], {}
    return graph


def reductions_through_views(graph: Graph) -> Graph:
    """A sum, mean, max or min over the trailing dims of a reshape of a kernel's result that keeps the dims before
    them reduces the source over its trailing dims instead (GroupNorm's view back to (N, C, D, H, W), then a mean
    over all but N): the same elements, in a space the kernel computing the source shares, so that a norm's apply
    can run in the reduction's kernel (plan/conv_statistics.py) and the normalised tensor is never written."""
    for op in graph.ops:
        if op.name not in ("sum", "mean", "amax", "amin") or op.attrs.get("keepdim") or op.attrs.get("correction"):
            continue
        view = op.args[0]
        if view.producer is None or view.producer.name not in RESHAPES:
            continue
        source = view.producer.args[0]
        dims = norm_dims(op.attrs["dims"], view.rank)
        first = min(dims, default=view.rank)
        # a kernel's result (laid out as its shape): the source's trailing dims are then one run, as the view's
        if computed(source) and set(dims) == set(range(first, view.rank)) and first < source.rank and \
                tuple(source.shape[:first]) == tuple(view.shape[:first]):
            op.args = [source, *op.args[1:]]
            op.attrs = dict(op.attrs, dims=tuple(range(first, source.rank)))
    return dead_code_eliminated(graph)


def common_subexpressions(graph: Graph) -> Graph:
    """One op where the graph computes the same thing twice (logsumexp's max beside softmax's, a size read
    twice), so that a kernel does not redo it."""
    seen: dict[tuple, Value] = {}
    replace: dict[Value, Value] = {}

    def key_of(arg):
        if isinstance(arg, Value):
            return ("v", id(replace.get(arg, arg)))
        if isinstance(arg, (list, tuple)):
            return ("t", tuple(key_of(a) for a in arg))
        return ("c", type(arg).__name__, repr(arg))

    kept = []
    for op in graph.ops:
        op.args = [substituted(a, replace) for a in op.args]
        op.attrs = {k: substituted(v, replace) for k, v in op.attrs.items()}
        key = (op.name, key_of(op.args), tuple(sorted((k, key_of(v)) for k, v in op.attrs.items())))
        if key in seen and op.out.is_tensor == seen[key].is_tensor and op.out.shape == seen[key].shape:
            replace[op.out] = seen[key]
            seen[key].assumed |= op.out.assumed
            continue
        seen[key] = op.out
        kept.append(op)
    graph.ops = kept
    graph.outputs = [replace.get(v, v) for v in graph.outputs]
    return graph


def substituted(arg, replace: dict):
    """arg with the values `replace` names replaced, inside tuples and lists too."""
    if isinstance(arg, Value):
        return replace.get(arg, arg)
    if isinstance(arg, tuple):
        return tuple(substituted(a, replace) for a in arg)
    if isinstance(arg, list):
        return [substituted(a, replace) for a in arg]
    return arg


def _prepared(graph: Graph) -> Graph:
    """The graph rewritten as every plan starts from it (scans directed, views sunk, common work shared)."""
    graph = sink_through_cats(directed_scans(graph))
    return reductions_through_views(sink_views(common_subexpressions(trivial_reductions(graph))))


def plan(graph: Graph, tile_reductions: bool = True) -> Plan:
    """Cut the graph into kernels and host steps, in execution order (`tile_reductions`: Planner's)."""
    return Planner(_prepared(graph), tile_reductions).plan()


def plan_with_tails_in_rows(graph: Graph) -> Plan | None:
    """The plan with a costly tail of a product's epilogue computed in the norm's row kernel after it
    (plan/tails.py); None where the graph has no such tail."""
    graph = _prepared(graph)
    return Planner(graph).plan() if raised_tails(graph) else None
