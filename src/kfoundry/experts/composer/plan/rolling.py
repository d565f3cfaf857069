"""Loop rolling: repeated structure in a trace (the steps of a cell in a Python loop, identical blocks of a
`Sequential` or a `ModuleList`) becomes one loop in the candidate's forward over one set of kernels, so that a
candidate's size and its compose time do not grow with the number of steps or blocks.

A trace unrolls `for t in range(steps)`. Where its op list holds `count` back-to-back copies of one body, every
copy reading what the one before made at the same places, the graph is cut in three: the ops before the loop, the
body (the first copy) and the ops after it, each planned on its own. Between copies the body may differ only in

* the state it starts from: what the previous copy made (a hidden state), and before the first, a value made
  before the loop (`Carry`);
* an index that moves by the same amount each step (`x[t]`, `x[:, t]`: `StepIndex`);
* the layer whose parameters it reads, an index in their attribute paths (`blocks.3.conv.weight`: `LayerParam`).

After the loop, the last copy's values are what the body's names hold; a concatenation or stack of one value of
every copy (`torch.stack(outputs)`) becomes a tensor the body writes a slice of each step (`Slot`). Anything
else (a copy reading a value two copies back, the ops after the loop reading a middle copy) leaves the trace as it
is: unrolled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kfoundry.experts.composer.ir.graph import (
    CONVS,
    GEMMS,
    INPUT,
    PARAM,
    POOLS,
    RECURRENT,
    REDUCTIONS,
    SCANS,
    SYM,
    TENSOR,
    Graph,
    Op,
    Value,
    category,
)
from kfoundry.experts.composer.plan.fusion import plan
from kfoundry.experts.composer.plan.steps import Plan, describe_groups, name_groups

MIN_COUNT = 2
# a body worth a loop computes more than pointwise ops: a pointwise chain fuses into one kernel unrolled
ANCHORS = GEMMS | CONVS | POOLS | SCANS | RECURRENT | REDUCTIONS
# the attrs that may move by a step: an index, or the layer in a number's attribute path (blocks.3.norm.eps)
MOVING = {"select": ("index",), "slice": ("start", "stop"), "sym_attr": ("path",)}
MAX_TRIES = 12  # candidate loops validated before giving up


@dataclass(eq=False)
class Carry:
    state: Value  # what the body reads: the previous step's `next`, or `init` before the first step
    init: Value
    next: Value  # the body's value the next step starts from


@dataclass(eq=False)
class StepIndex:
    value: Value  # a host number the body reads: start + stride * step
    start: int
    stride: int


@dataclass(eq=False)
class LayerParam:
    value: Value  # the first step's parameter (or a number the layer holds, read by sym_attr)
    part: int  # which dot-separated part of its attribute path is the layer index
    start: int
    stride: int


@dataclass(eq=False)
class Slot:
    value: Value  # the body's value, written into `collected` at the step's place
    collected: Value  # the concatenation (or stack) of every step's value
    dim: int
    stacked: bool  # one index along dim per step (a stack) rather than a slice of the value's own length
    reverse: bool  # the last step's value comes first


@dataclass(eq=False)
class Loop:
    count: int
    carries: list[Carry] = field(default_factory=list)
    indices: list[StepIndex] = field(default_factory=list)
    layer_params: list[LayerParam] = field(default_factory=list)
    layer_numbers: list[LayerParam] = field(default_factory=list)  # read in the loop, not at the top of forward
    slots: list[Slot] = field(default_factory=list)
    along: tuple[Value, int] | None = None  # the loop walks this input's dim from 0 to its end: its size is the count
    described: str = ""

    def index_of(self, value: Value) -> StepIndex | None:
        return next((i for i in self.indices if i.value is value), None)


@dataclass(eq=False)
class Rolled:
    """A graph cut around one loop: `before`, `body` (one step) and `after`, each a graph of its own; values that
    cross from one to another are read through stand-ins (`aliases`: stand-in -> the value it names)."""
    before: Graph
    body: Graph
    after: Graph
    loop: Loop
    aliases: dict[Value, Value]
    outputs: list[Value]  # the whole forward's outputs


# -- finding a repeated body --------------------------------------------------------------------------------------
def _frozen(x: Any) -> Any:
    if isinstance(x, Value):
        return ("tensor", x.shape, str(x.dtype)) if x.is_tensor else ("number", x.kind)
    if isinstance(x, (list, tuple)):
        return tuple(_frozen(a) for a in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in x.items()))
    try:
        hash(x)
    except TypeError:
        return repr(x)
    return (type(x).__name__, x)


def signature(op: Op) -> tuple:
    """What two copies of one op share: name, argument shapes, numbers (moving indices left out)."""
    attrs = {k: v for k, v in op.attrs.items() if k not in MOVING.get(op.name, ())}
    return (op.name, _frozen(op.args), _frozen(attrs), _frozen(op.out))


def candidates(ops: list[Op]) -> list[tuple[int, int, int]]:
    """(start, period, count) of back-to-back repeats of op signatures, most ops covered first."""
    ids: dict[tuple, int] = {}
    sig = np.array([ids.setdefault(signature(op), len(ids)) for op in ops], dtype=np.int64)
    n = len(sig)
    found: list[tuple[int, int, int, int]] = []
    for period in range(1, n // MIN_COUNT + 1):
        same = np.concatenate(([False], sig[:-period] == sig[period:], [False]))
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        for begin, end in zip(edges[::2], edges[1::2]):
            run = end - begin
            count = run // period + 1
            if count >= MIN_COUNT:
                found.append((-count * period, period, int(begin), count))
    found.sort()
    return [(start, period, count) for _, period, start, count in found]


# -- checking that the copies are one body ----------------------------------------------------------------------
class _Mismatch(Exception):
    pass


class _Matcher:
    def __init__(self, ops: list[Op], start: int, period: int, count: int) -> None:
        self.start, self.period, self.count = start, period, count
        self.where: dict[Value, tuple[int, int]] = {}
        for j in range(count):
            for k in range(period):
                self.where[ops[start + j * period + k].out] = (j, k)
        self.roles: dict[tuple, tuple] = {}
        self.ops = ops

    def op(self, j: int, k: int) -> Op:
        return self.ops[self.start + j * self.period + k]

    def run(self) -> None:
        for k in range(self.period):
            first = self.op(0, k)
            expected = signature(first)
            for j in range(1, self.count):
                other = self.op(j, k)
                if signature(other) != expected:
                    raise _Mismatch(f"op {k} differs in step {j}")
                self._match(("args",), first.args, other.args, j, k, first.name)
                self._match(("attrs",), first.attrs, other.attrs, j, k, first.name)

    def _role(self, key: tuple, role: tuple) -> None:
        if self.roles.setdefault(key, role) != role:
            raise _Mismatch(f"{key} plays {role} and {self.roles[key]}")

    def _match(self, where: tuple, a: Any, b: Any, j: int, k: int, name: str) -> None:
        if isinstance(a, Value) or isinstance(b, Value):
            if not (isinstance(a, Value) and isinstance(b, Value)):
                raise _Mismatch(f"{where}: a value against a number")
            self._role((k, where), self._value_role(a, b, j))
        elif isinstance(a, (list, tuple)):
            if len(a) != len(b):
                raise _Mismatch(f"{where}: lengths")
            for i, (x, y) in enumerate(zip(a, b)):
                self._match(where + (i,), x, y, j, k, name)
        elif isinstance(a, dict):
            for key in a:
                self._match(where + (key,), a[key], b.get(key), j, k, name)
        elif a != b or type(a) is not type(b):
            moving = where[0] == "attrs" and len(where) == 2 and where[1] in MOVING.get(name, ())
            if moving and isinstance(a, str) and isinstance(b, str):
                self._role((k, where), ("layer",) + _layer_move(a, b, j))
                return
            if not (moving and isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool)):
                raise _Mismatch(f"{where}: {a!r} against {b!r}")
            stride = b - a
            if stride % j:
                raise _Mismatch(f"{where}: does not move by a step")
            self._role((k, where), ("moves", a, stride // j))
        elif where[0] == "attrs" and len(where) == 2 and where[1] in MOVING.get(name, ()) and isinstance(a, int):
            self._role((k, where), ("moves", a, 0))

    def _value_role(self, a: Value, b: Value, j: int) -> tuple:
        if a in self.where:
            ja, ka = self.where[a]
            if ja != 0 or self.where.get(b) != (j, ka):
                raise _Mismatch(f"{a!r} is not the same step's value")
            return ("local", ka)
        if b is a:
            return ("same", id(a))
        if not (a.is_tensor and b.is_tensor):
            raise _Mismatch(f"{a!r} and {b!r}: host numbers that differ between steps")
        if b in self.where:
            jb, kb = self.where[b]
            if jb != j - 1:
                raise _Mismatch(f"{b!r} is from step {jb}, read in step {j}")
            return ("carry", id(a), kb)
        if a.kind == PARAM and b.kind == PARAM:
            return ("layer",) + _layer_move(a.path, b.path, j)
        raise _Mismatch(f"{a!r} and {b!r} are different values from outside the loop")


def _layer_move(first: str, other: str, j: int) -> tuple[int, int, int]:
    parts, others = first.split("."), other.split(".")
    differing = [i for i, (x, y) in enumerate(zip(parts, others)) if x != y]
    if len(parts) != len(others) or len(differing) != 1 or not all(
            p.isdigit() for p in (parts[differing[0]], others[differing[0]])):
        raise _Mismatch(f"{first} and {other} are not one layer list")
    part = differing[0]
    stride, rest = divmod(int(others[part]) - int(parts[part]), j)
    if rest:
        raise _Mismatch(f"{first} and {other} do not move by a step")
    return part, int(parts[part]), stride


# -- cutting the graph --------------------------------------------------------------------------------------------
def roll(graph: Graph) -> list[Rolled]:
    """The graph cut around its loops, first to last (none where it holds no repeated body worth a loop): the
    loops covering the most ops first, each cut from what the previous one left after it."""
    rolled: list[Rolled] = []
    rest = graph
    for first_op, period, count in _loops(graph.ops):
        if first_op not in rest.ops:
            continue
        start = rest.ops.index(first_op)
        try:
            matcher = _Matcher(rest.ops, start, period, count)
            matcher.run()
            cut = _cut(rest, matcher)
        except _Mismatch:
            continue
        rolled.append(cut)
        rest = cut.after
    return rolled


def _loops(ops: list[Op]) -> list[tuple[Op, int, int]]:
    """(first op, period, count) of the repeated bodies worth a loop that do not overlap, in the ops' order."""
    chosen: list[tuple[int, int, int]] = []
    tried = 0
    for start, period, count in candidates(ops):
        end = start + period * count
        if any(start < e and s < end for s, e, _ in chosen):
            continue
        if not any(op.name in ANCHORS for op in ops[start:start + period]):
            continue
        tried += 1
        if tried > MAX_TRIES:
            break
        try:
            _Matcher(ops, start, period, count).run()
        except _Mismatch:
            continue
        chosen.append((start, end, period))
    return [(ops[s], p, (e - s) // p) for s, e, p in sorted(chosen)]


@dataclass(eq=False)
class LoopStart:
    rolled: Rolled


@dataclass(eq=False)
class LoopEnd:
    rolled: Rolled


def plan_rolled(graph: Graph) -> Plan:
    """The plan of a graph with its loops rolled where it has any: for each loop the steps before it, a
    LoopStart, one step's kernels and a LoopEnd; then the steps after the last."""
    loops = roll(graph)
    if not loops:
        return plan(graph)
    steps: list = []
    ops: list[Op] = []
    for rolled in loops:
        before, body = plan(rolled.before), plan(rolled.body)
        steps += before.steps + [LoopStart(rolled)] + body.steps + [LoopEnd(rolled)]
        ops += before.graph.ops + body.graph.ops
        rolled.loop.described = describe_groups(body.groups)
    after = plan(loops[-1].after)
    steps += after.steps
    ops += after.graph.ops
    whole = Graph(list(graph.inputs), dict(graph.params), ops, loops[-1].outputs, graph.output_kind)
    name_groups(steps)  # one name each across the parts, each planned on its own
    return Plan(whole, steps, loops)


def _cut(graph: Graph, m: _Matcher) -> Rolled:
    """The graph cut around the loop `m` matched; raises _Mismatch (before changing anything) where the ops after
    the loop read a middle step's value."""
    start, period, count = m.start, m.period, m.count
    end = start + period * count
    before_ops, body_ops, after_ops = graph.ops[:start], graph.ops[start:start + period], graph.ops[end:]
    slots, dropped = _collect(m, after_ops)
    after_ops = [op for op in after_ops if op not in dropped]
    outputs = list(graph.outputs)
    last = {m.op(count - 1, k).out: m.op(0, k).out for k in range(period)}
    in_loop = m.where
    for op in after_ops:
        for v in op.inputs:
            if v in in_loop and v not in last:
                raise _Mismatch(f"{v!r} of a middle step is read after the loop")
    if any(v in in_loop and v not in last for v in outputs):
        raise _Mismatch("a middle step's value is returned")
    loop = Loop(count, slots=slots)
    for slot in slots:
        slot.collected.name = "collected"
    _bind_body(loop, m, body_ops)
    loop.along = _along(loop, body_ops, graph)
    aliases: dict[Value, Value] = {}
    made_before = {op.out: None for op in before_ops}  # ordered: the source is the same from run to run
    crossing = made_before | {s.collected: None for s in slots}
    body_reads = _rewire(body_ops, made_before, aliases, {})
    after_reads = _rewire(after_ops, crossing, aliases, last)
    outputs = [_stand_in(v, crossing, aliases, last) for v in outputs]
    inits = {c.init for c in loop.carries}
    before_out = [v for v in made_before if v in body_reads or v in after_reads or v in inits or v in outputs]
    returned = {aliases[o] for o in outputs if o in aliases}
    body_out = [c.next for c in loop.carries] + [s.value for s in slots] + \
        [op.out for op in body_ops if op.out in after_reads or op.out in returned]
    inputs = list(graph.inputs)
    return Rolled(
        before=Graph(inputs, dict(graph.params), before_ops, _unique(before_out)),
        body=Graph(inputs + [s for s in aliases if aliases[s] in made_before] + [c.state for c in loop.carries],
                   dict(graph.params), body_ops, _unique(body_out)),
        after=Graph(inputs + list(aliases), dict(graph.params), after_ops, outputs, graph.output_kind),
        loop=loop, aliases=aliases, outputs=outputs)


def _unique(values: list[Value]) -> list[Value]:
    return list(dict.fromkeys(values))


def _collect(m: _Matcher, after: list[Op]) -> tuple[list[Slot], set[Op]]:
    """Concatenations (stacks) of one value of every step, which become slots the body writes, and the ops they
    drop: the concatenations and the views that fed them (a stack's unsqueeze of each step's value)."""
    slots: list[Slot] = []
    dropped: set[Op] = set()
    for op in after:
        if op.name != "cat" or len(op.args) != m.count:
            continue
        found = _slot(op, m)
        if found is None or any(s.value is found[0].value for s in slots):
            continue
        slots.append(found[0])
        dropped |= found[1] | {op}
    return slots, dropped


def _slot(cat: Op, m: _Matcher) -> tuple[Slot, set[Op]] | None:
    dim = cat.attrs["dim"] % cat.out.rank
    bases, views, stacked = [], set(), None
    for arg in cat.args:
        base, unsqueezed = arg, False
        if arg.producer is not None and arg.producer.name == "unsqueeze" and \
                arg.producer.attrs["dim"] % (arg.rank) == dim and arg not in m.where:
            base, unsqueezed = arg.producer.args[0], True
            views.add(arg.producer)
        if stacked is None:
            stacked = unsqueezed
        if unsqueezed != stacked or base not in m.where:
            return None
        bases.append(m.where[base])
    positions = {k for _, k in bases}
    steps = [j for j, _ in bases]
    if len(positions) != 1 or sorted(steps) != list(range(m.count)):
        return None
    reverse = steps == list(range(m.count))[::-1]
    if steps != list(range(m.count)) and not reverse:
        return None
    k = positions.pop()
    value = m.op(0, k).out
    if value.producer is None or category(value.producer.name) in ("view", "sym") or not value.is_tensor:
        return None  # only a value a kernel writes can be written into a slice
    return Slot(value, cat.out, dim, bool(stacked), reverse), views


def _bind_body(loop: Loop, m: _Matcher, body: list[Op]) -> None:
    """Stand-ins in the body for what moves between steps: the carried states, the moving indices, the layers."""
    states: dict[tuple[int, int], Carry] = {}
    indices: dict[tuple[int, int], StepIndex] = {}
    for (k, where), role in m.roles.items():
        op = body[k]
        if role[0] == "carry":
            init = _get(op, where)
            nxt = body[role[2]].out
            carry = states.get((id(init), id(nxt)))
            if carry is None:
                state = Value("state", INPUT, init.shape, init.dtype, init.fixed_dtype)
                carry = states[(id(init), id(nxt))] = Carry(state, init, nxt)
                loop.carries.append(carry)
            _set(op, where, carry.state)
        elif role[0] == "moves" and role[2] != 0:
            _, start, stride = role
            index = indices.get((start, stride))
            if index is None:
                value = Value("step" if (start, stride) == (0, 1) else "index", SYM, (), None)
                value.concrete = start
                index = indices[(start, stride)] = StepIndex(value, start, stride)
                loop.indices.append(index)
            _set(op, where, index.value)
        elif role[0] == "layer" and op.name == "sym_attr":
            loop.layer_numbers.append(LayerParam(op.out, *role[1:]))
        elif role[0] == "layer":
            param = _get(op, where)
            if not any(p.value is param for p in loop.layer_params):
                loop.layer_params.append(LayerParam(param, *role[1:]))


def _get(op: Op, where: tuple) -> Any:
    node: Any = op.args if where[0] == "args" else op.attrs
    for key in where[1:]:
        node = node[key]
    return node


def _set(op: Op, where: tuple, value: Any) -> None:
    if where[0] == "attrs" and len(where) == 2:
        op.attrs = dict(op.attrs, **{where[1]: value})
        return
    container = "args" if where[0] == "args" else "attrs"
    root = getattr(op, container)
    setattr(op, container, _replaced(root, where[1:], value))


def _replaced(node: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return dict(node, **{head: _replaced(node[head], rest, value)})
    items = list(node)
    items[head] = _replaced(items[head], rest, value)
    return tuple(items) if isinstance(node, tuple) else items


def _along(loop: Loop, body: list[Op], graph: Graph) -> tuple[Value, int] | None:
    """The input dim the loop walks from its start to its end in steps of one (x[t] for t in range(len(x))):
    the loop then runs for that dim's size, whatever it is when forward runs."""
    for op in body:
        index = op.attrs.get("index") if op.name == "select" else None
        step = loop.index_of(index) if isinstance(index, Value) else None
        if step is None or op.args[0].kind != INPUT or op.args[0].index is None:
            continue
        x = op.args[0]
        dim = op.attrs["dim"] % x.rank
        if x.shape[dim] == loop.count and ((step.start, step.stride) == (0, 1)
                                           or (step.start, step.stride) == (loop.count - 1, -1)):
            follow_length(graph.ops, x, dim)
            return x, dim
    return None


def follow_length(ops: list[Op], x: Value, dim: int) -> None:
    """The trace took x's size along dim as a constant; a loop that walks that dim to its end no longer needs it
    to be one: the size queries of it are no longer assumed."""
    for op in ops:
        if op.name == "sym_size" and op.args[0] is x and op.attrs["dim"] % x.rank == dim:
            op.out.assumed = False


def _stand_in(v: Value, crossing: set[Value], aliases: dict[Value, Value], last: dict[Value, Value]) -> Value:
    target = last.get(v, v)
    if v not in crossing and v not in last:
        return v
    for stand_in, named in aliases.items():
        if named is target and stand_in.shape == v.shape:
            return stand_in
    stand_in = Value(target.name, INPUT, v.shape, v.dtype, v.fixed_dtype)
    aliases[stand_in] = target
    return stand_in


def _rewire(ops: list[Op], crossing: set[Value], aliases: dict[Value, Value], last: dict[Value, Value]) -> set[Value]:
    """Reads of tensors made in another part of the cut go through stand-ins; returns the values read so."""
    read: set[Value] = set()

    def swap(x: Any) -> Any:
        if isinstance(x, Value):
            if x.kind == TENSOR and (x in crossing or x in last):
                read.add(last.get(x, x))
                return _stand_in(x, crossing, aliases, last)
            return x
        if isinstance(x, tuple):
            return tuple(swap(a) for a in x)
        if isinstance(x, list):
            return [swap(a) for a in x]
        return x

    for op in ops:
        op.args = [swap(a) for a in op.args]
        op.attrs = {k: swap(v) for k, v in op.attrs.items()}
    return read


