"""Pooling before the store: a convolution whose output reaches a max or average pooling only through pointwise
ops writes, per pooling window, the largest and smallest of its outputs (or their mean) instead of the output.

The ops between the convolution and the pooling are a function f of the conv output whose other operands are
the same over a window (a norm's per-channel statistics and affine, a per-channel scale). Where f is monotone
the largest of f over a window is f of the window's largest or of its smallest element (whichever is larger
after f), and where f is affine the mean of f is f of the mean. So the convolution's epilogue reduces each
window of its tile (templates/conv.py orders a tile's rows window by window) and stores 1/k^d of its output,
and the pooling kernel (templates/pool.py) applies f to those and keeps the larger: the conv output never
reaches memory. A norm's statistics (plan/conv_statistics.py) are gathered from the full tile before the
windows are reduced, so both fusions combine.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

from kfoundry.experts.composer.ir.graph import RESHAPES, Op, Value, category
from kfoundry.experts.composer.plan.fusion import own_map, view_root
from kfoundry.experts.composer.plan.steps import Group, Plan, renumbered

MAX_WINDOW_ROWS = 16  # a window's rows in a tile (its volume, rounded up to a power of two): at most the least BM

# f(largest) is the largest f where f never decreases; the others decrease or are unknown (a product by a tensor)
INCREASING = frozenset({"relu", "relu6", "sigmoid", "tanh", "exp", "exp2", "expm1", "log", "log2",
                        "log10", "log1p", "sqrt", "erf", "floor", "ceil", "round", "trunc", "sign", "selu",
                        "softsign", "hardsigmoid", "logsigmoid", "clamp"})
DECREASING = frozenset({"neg", "rsqrt"})


@dataclass(eq=False)
class Link:
    """A pointwise kernel between the convolution and the pooling (the pooling's prologue last)."""

    group: Group
    entry: Value  # the value it reads from the link before (through views): held in registers instead
    export: Value  # what it hands the next link


@dataclass(eq=False)
class Windows:
    """What a convolution's epilogue stores per pooling window, and the ops the pooling kernel applies to it."""

    pool: Op  # max_pool or avg_pool, kernel == stride, no padding
    source: Value  # the conv group's export the tail starts from
    kernel: tuple[int, ...]  # the window's extent along each spatial dim of the convolution (1: not pooled)
    kinds: tuple[str, ...]  # "max" and "min" of each window (max pooling), or "mean" (average pooling)
    chain: list[Link]

    @property
    def volume(self) -> int:
        return math.prod(self.kernel)

    @property
    def rows(self) -> int:
        """A window's rows in a conv tile: its volume rounded up to a power of two (the rest masked)."""
        return 1 << (self.volume - 1).bit_length()


def with_pooling_before_store(plan: Plan) -> Plan | None:
    """The plan with each convolution whose output only reaches a pooling storing its windows' extrema (or means)
    instead; None where no convolution qualifies. The given plan is left as it is."""
    if plan.loops:
        return None
    own = {id(step): copy.copy(step) for step in plan.steps}
    steps = [own[id(step)] for step in plan.steps]
    found = False
    for pool in [g for g in plan.groups if g.kind == "pool"]:
        made = _windows(plan, pool)
        if made is None:
            continue
        windows, conv = made
        own[id(conv)].windows, own[id(conv)].exports = windows, []
        own[id(pool)].windows, own[id(pool)].prologue = windows, None
        for link in windows.chain:
            if link.group is not pool.prologue:
                steps.remove(own[id(link.group)])
        found = True
    return renumbered(plan, steps) if found else None


def _windows(plan: Plan, pool: Group) -> tuple[Windows, Group] | None:
    op = pool.anchor
    attrs = op.attrs
    if op.name not in ("max_pool", "avg_pool") or attrs.get("divisor_override"):
        return None
    nd = len(attrs["kernel"])
    if tuple(attrs["stride"]) != tuple(attrs["kernel"]) or any(attrs["padding"]) or \
            any(d != 1 for d in attrs.get("dilation", (1,) * nd)):
        return None
    owners = {v: g for g in plan.groups for v in g.vmap}
    if pool.prologue is not None:
        owners.update({v: pool.prologue for v in pool.prologue.vmap})
    walked = _links(pool, op.args[0], owners)
    if walked is None:
        return None
    chain, source = walked
    conv = owners.get(source)
    z = op.args[0]
    if conv is None or conv.kind != "conv" or conv.reduced or conv.prologue is not None or conv.exports != [source] \
            or source in plan.graph.outputs or conv.vmap[source] != own_map(source) or source.shape != conv.space \
            or z.shape != source.shape or z.rank - nd < 2 or not source.is_float:
        return None
    kernel = (1,) * (z.rank - nd - 2) + tuple(int(k) for k in attrs["kernel"])
    divisible = all(int(s) % k == 0 for s, k in zip(source.shape[2:], kernel))
    windows = Windows(op, source, kernel, (), chain)
    if windows.volume == 1 or windows.rows > MAX_WINDOW_ROWS or attrs.get("ceil_mode") and not divisible:
        return None
    if not _only_readers(plan, source, chain, pool, conv):
        return None
    first = min(d for d, k in enumerate(kernel) if k > 1) + 2
    block = math.prod(int(s) for s in source.shape[first:])  # a window never leaves a run of this many elements
    properties = {"increasing", "monotone", "affine"}
    for link in chain:
        found = _properties(link, block)
        if found is None:
            return None
        properties &= found
    if op.name == "avg_pool":
        kinds = ("mean",) if "affine" in properties else None
    else:
        kinds = ("max",) if "increasing" in properties else ("max", "min") if "monotone" in properties else None
    if kinds is None:
        return None
    windows.kinds = kinds
    return windows, conv


def _reshape_root(value: Value) -> Value | None:
    """The value a chain of reshapes shows (a reshape keeps each element's flat index); None through another view."""
    while value.producer is not None and category(value.producer.name) == "view":
        if value.producer.name not in RESHAPES:
            return None
        value = value.producer.args[0]
    return value


def _links(pool: Group, z: Value, owners: dict[Value, Group]) -> tuple[list[Link], Value] | None:
    """The pointwise kernels from a convolution's export to the pooling's input z, in order, and that export."""
    chain: list[Link] = []
    value = _reshape_root(z)
    while value is not None:
        group = owners.get(value)
        if group is None or group.kind == "conv":
            return (chain, value) if group is not None else None
        if group.kind != "pointwise" or group.moves or any(link.group is group for link in chain) or \
                group is not pool.prologue and group.exports != [value]:
            return None
        if group.vmap[value] != own_map(value) or value.shape != group.space:
            return None
        entries = [v for v, m in group.leaves() if v.shape == group.space and v.producer is not None and
                   _reshape_root(v) in owners]
        if len(entries) != 1 or dict(group.leaves()).get(entries[0]) != own_map(entries[0]):
            return None
        chain.insert(0, Link(group, entries[0], value))
        value = _reshape_root(entries[0])
    return None


def _only_readers(plan: Plan, source: Value, chain: list[Link], pool: Group, conv: Group) -> bool:
    """Nothing but the chain reads the conv output or a link's export (the norm's moments come from the epilogue;
    the pooling reads the last link's as its input only)."""
    passed = {source} | {link.export for link in chain}
    links = {id(link.group) for link in chain}
    for group in plan.groups:
        if group is conv or group.kind == "moments" and conv.statistics is not None and \
                group.statistics is conv.statistics:
            continue
        read = [v for v, _ in group.leaves()]
        if group.prologue is not None and group.prologue is not pool.prologue:
            read += [v for v, _ in group.prologue.leaves()]
        if group.anchor is not None and group is not pool:
            read += [a for a in group.anchor.args if isinstance(a, Value)]
        if id(group) not in links and any(view_root(v) in passed for v in read if v.is_tensor):
            return False
    return not any(view_root(v) in passed for v in plan.graph.outputs)


def _properties(link: Link, block: int) -> set[str] | None:
    """Which of increasing, monotone and affine the link's function of its entry is, with every other operand the
    same over a window; None when some operand changes within a window or an op is neither."""
    group = link.group
    sizes = [int(s) for s in group.space]
    inner = [math.prod(sizes[j + 1:]) for j in range(len(sizes))]
    steady = {j for j in range(len(sizes)) if sizes[j] == 1 or inner[j] % block == 0}  # same over a window

    def constant(op: Op, position: int) -> bool:
        arg = op.args[position]
        if not (isinstance(arg, Value) and arg.is_tensor):
            return True
        if arg in group.vmap:
            return arg not in chained
        return all(d is None or d in steady for d in group.leaf_map(op, position))

    chained = {link.entry}
    found = {"increasing", "monotone", "affine"}
    for op in group.ops:
        if op.name == "iota":
            return None
        on_chain = [i for i, a in enumerate(op.args) if isinstance(a, Value) and a in chained]
        others = [i for i in range(len(op.args)) if i not in on_chain]
        if not all(constant(op, i) for i in others):
            return None
        if not on_chain:
            continue
        if len(on_chain) != 1 or op.args[on_chain[0]].shape != op.out.shape or \
                group.vmap[op.out] != own_map(op.out):
            return None
        kind = _kind(op, on_chain[0])
        if kind is None:
            return None
        found &= kind
        chained.add(op.out)
    return found if link.export in chained else None


def _kind(op: Op, position: int) -> set[str] | None:
    """The properties of op as a function of its argument at `position`, the others held."""
    name, attrs = op.name, op.attrs
    other = op.args[1 - position] if len(op.args) == 2 else None
    positive = isinstance(other, (int, float)) and not isinstance(other, bool) and other > 0
    if name == "identity":
        return {"increasing", "monotone", "affine"}
    if name == "cast":  # to the same float type, or rounded to a narrower one (never decreasing)
        if not op.out.is_float:
            return None
        return {"increasing", "monotone", "affine"} if attrs["dtype"] == op.args[0].dtype else {"increasing", "monotone"}
    if name in INCREASING or name == "leaky_relu" and attrs["slope"] >= 0 or \
            name == "elu" and attrs["alpha"] >= 0 and attrs.get("scale", 1.0) > 0 and attrs.get("input_scale", 1.0) > 0 \
            or name == "softplus" and attrs["beta"] > 0 or \
            name == "threshold" and attrs["value"] <= attrs["threshold"]:
        return {"increasing", "monotone"}
    if name in DECREASING:
        return {"monotone", "affine"} if name == "neg" else {"monotone"}
    if name == "add" or name == "sub" and position == 0:
        return {"increasing", "monotone", "affine"}
    if name == "sub":
        return {"monotone", "affine"}
    if name in ("maximum", "minimum"):
        return {"increasing", "monotone"}
    if name == "mul" or name == "div" and position == 0:
        rounded = name == "div" and attrs.get("rounding_mode")
        found = {"monotone"} if rounded else {"monotone", "affine"}
        return found | {"increasing"} if positive else found
    return None
