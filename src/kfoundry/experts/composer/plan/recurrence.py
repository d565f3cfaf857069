"""Loop fission into a recurrence: a Python loop over a sequence whose steps carry one hidden state through an
Elman cell, `h = tanh(u_t @ A.T + h @ B.T + bias)` (or relu), becomes the recurrent template's `recurrent` op, and
the rest of each step leaves the loop.

Written as `cat([u_t, h]) @ W.T` (W split into A and B by columns) or as two Linears added, the cell's input side
does not depend on the state: the projection of every step is one GEMM over the whole sequence before the
recurrence. What a step computes from its new state alone (an output Linear, an activation) feeds nothing the next
step reads: it runs once over every step's state after the recurrence, one GEMM where the loop had one per step.
The recurrence itself is the template's step kernel (the product with B, the projection and the activation fused,
the state read straight from the previous step's output), launched once per step by a host loop over the
sequence's length, so the candidate holds at any step count.

A loop that is not of that form (a state read after a normalisation, two carried states, per-step parameters, a
step's value read by a later one other than the state) is left to loop rolling as it is."""

from __future__ import annotations

from typing import Any, Iterator

from kfoundry.experts.composer.ir.builder import GraphBuilder
from kfoundry.experts.composer.ir.graph import INDEX, POINTWISE, Graph, Op, Value, dead_code_eliminated, flat_values
from kfoundry.experts.composer.plan.fusion import substituted
from kfoundry.experts.composer.plan.rolling import (
    MOVING,
    _collect,
    _get,
    _loops,
    _Matcher,
    _Mismatch,
    follow_length,
)

ACTIVATIONS = {"tanh": "RNN_TANH", "relu": "RNN_RELU"}
BATCHED_REDUCTIONS = frozenset({"sum", "mean", "amax", "amin"})
# what a value of one step depends on: nothing that moves, the step's slice of the sequence, the carried state
INVARIANT, STEP, STATE = 0, 1, 2


class NotRecurrence(Exception):
    pass


def with_recurrences(graph: Graph) -> Graph:
    """The graph with every loop of recurrence form made a `recurrent` op (the graph itself where none is)."""
    while True:
        fissioned = fission(graph)
        if fissioned is None:
            return graph
        graph = fissioned


def fission(graph: Graph) -> Graph | None:
    """A new graph with the first loop of recurrence form made a `recurrent` op, or None where no loop is."""
    for first_op, period, count in _loops(graph.ops):
        matcher = _Matcher(graph.ops, graph.ops.index(first_op), period, count)
        try:
            matcher.run()
            return _Fission(graph, matcher).build()
        except (_Mismatch, NotRecurrence):
            continue
    return None


def _walk(node: Any, where: tuple) -> Iterator[tuple[tuple, Value]]:
    if isinstance(node, Value):
        yield where, node
    elif isinstance(node, (list, tuple)):
        for i, item in enumerate(node):
            yield from _walk(item, where + (i,))
    elif isinstance(node, dict):
        for key, item in node.items():
            yield from _walk(item, where + (key,))


def _values(op: Op) -> Iterator[tuple[tuple, Value]]:
    yield from _walk(op.args, ("args",))
    yield from _walk(op.attrs, ("attrs",))


class _Fission:
    def __init__(self, graph: Graph, m: _Matcher) -> None:
        self.graph, self.m = graph, m
        self.body = [m.op(0, k) for k in range(m.period)]
        self.local = {op.out: k for k, op in enumerate(self.body)}
        self.b = GraphBuilder()
        end = m.start + m.period * m.count  # names of the steps after the first go with them: not taken
        kept = graph.ops[:m.start] + self.body + graph.ops[end:]
        self.b._taken.update(v.name for op in kept for v in [op.out] + flat_values([op.args, op.attrs]))
        self.b._taken.update(v.name for v in list(graph.inputs) + list(graph.params.values()))
        self.batched: dict[Value, Value] = {}  # a step's value -> the same value for every step, stacked at `time`
        self.time = 0
        self.reverse = False
        self.sequence: Value | None = None

    # -- what the loop is --------------------------------------------------------------------------------------
    def build(self) -> Graph:
        self._roles()
        self._depend()
        self._core()
        kept: list[Op] = []
        for k, op in enumerate(self.body):
            if self.dep[k] == INVARIANT:
                kept.append(op)
            elif self.dep[k] == STEP:
                self._batch(op)
        self.batched[self.body[self.next_k].out] = self._recurrence()
        for k, op in enumerate(self.body):
            if self.dep[k] == STATE and k not in self.core:
                self._batch(op)
        return self._joined(kept)

    def _roles(self) -> None:
        """The carried state's positions in the body, and the moving index: a walk along one dim of a sequence."""
        carries, moves = set(), set()
        self.state_at: set[tuple[int, tuple]] = set()
        for (k, where), role in self.m.roles.items():
            if role[0] == "carry":
                carries.add((role[1], role[2]))
                self.state_at.add((k, where))
            elif role[0] == "moves" and role[2] != 0:
                op = self.body[k]
                if op.name != "select" or where != ("attrs", "index"):
                    raise NotRecurrence(f"a moving {op.name}")
                moves.add((role[1], role[2], op.attrs["dim"] % op.args[0].rank, op.args[0]))
            elif role[0] == "layer":
                raise NotRecurrence("parameters that differ from step to step")
        if len(carries) != 1:
            raise NotRecurrence(f"{len(carries)} carried states")
        (_, self.next_k), = carries
        if len({(start, stride, dim) for start, stride, dim, _ in moves}) != 1:
            raise NotRecurrence("no single walk along a sequence")
        start, stride, self.time, _ = next(iter(moves))
        if (start, stride) not in ((0, 1), (self.m.count - 1, -1)):
            raise NotRecurrence("a walk that skips steps")
        self.reverse = stride < 0
        for *_, seq in moves:
            if seq in self.local or seq.shape[self.time] != self.m.count:
                raise NotRecurrence("a walk along something other than a whole sequence")
        k, where = next(iter(self.state_at))
        self.init: Value = _get(self.body[k], where)

    def _depend(self) -> None:
        self.dep: list[int] = []
        for k, op in enumerate(self.body):
            d = INVARIANT
            for where, v in _values(op):
                if (k, where) in self.state_at:
                    d = max(d, STATE)
                elif v in self.local:
                    d = max(d, self.dep[self.local[v]])
            if any(self._moves(k, attr) for attr in MOVING.get(op.name, ())):
                d = max(d, STEP)
            self.dep.append(d)

    def _core(self) -> None:
        """The cell: next = act(sum of terms), one term the state's product with a weight; the rest of the terms
        the step's input side."""
        act = self.body[self.next_k]
        if act.name not in ACTIVATIONS or act.attrs:
            raise NotRecurrence(f"a state made by {act.name}")
        self.kind = ACTIVATIONS[act.name]
        self.core = {self.next_k}
        terms: list[Any] = []
        self._terms(act.args[0], terms)
        state_terms = [t for t in terms if isinstance(t, Value) and t in self.local and
                       self.dep[self.local[t]] == STATE]
        if len(state_terms) != 1:
            raise NotRecurrence("not one product with the state")
        self.input_terms = [t for t in terms if t is not state_terms[0]]
        self._state_product(state_terms[0])
        for k, op in enumerate(self.body):  # nothing outside the cell reads inside it, nor the state
            if k in self.core:
                continue
            for where, v in _values(op):
                if (k, where) in self.state_at:
                    raise NotRecurrence("the state read outside the cell")
                if v in self.local and self.local[v] in self.core and self.local[v] != self.next_k:
                    raise NotRecurrence("a value inside the cell read outside it")

    def _terms(self, v: Any, terms: list[Any]) -> None:
        k = self.local.get(v) if isinstance(v, Value) else None
        if k is not None and self.dep[k] == STATE and self.body[k].name == "add" and not self.body[k].attrs:
            self.core.add(k)
            for arg in self.body[k].args:
                self._terms(arg, terms)
        else:
            terms.append(v)

    def _is_state(self, k: int, i: int) -> bool:
        return (k, ("args", i)) in self.state_at

    def _state_product(self, term: Value) -> None:
        k = self.local[term]
        mm = self.body[k]
        if mm.name != "matmul" or self._is_state(k, 1) or mm.args[1].rank != 2 or \
                (mm.args[1] in self.local and self.dep[self.local[mm.args[1]]] != INVARIANT):
            raise NotRecurrence("the state's product is not with a weight")
        self.core.add(k)
        self.weight_t = mm.args[1]  # (K, H): the state's rows, and where the state is concatenated the input's too
        self.split_input: tuple[Value, int] | None = None  # (u, the state's side) of cat([u, h]) or cat([h, u])
        if self._is_state(k, 0):
            return
        cat = self.body[self.local[mm.args[0]]] if mm.args[0] in self.local else None
        if cat is None or cat.name != "cat" or len(cat.args) != 2 or cat.attrs["dim"] % 2 != 1:
            raise NotRecurrence("the state's product is not with a weight")
        kc = self.local[mm.args[0]]
        self.core.add(kc)
        side = [i for i in range(2) if self._is_state(kc, i)]
        if len(side) != 1:
            raise NotRecurrence("the state concatenated more than once")
        self.split_input = (cat.args[1 - side[0]], side[0])

    def _weights(self) -> tuple[Value, Value | None]:
        """B (hidden, hidden), as PyTorch's weight_hh lays it out, and A.T (input, hidden) where the state's
        product also holds the input's (cat([u, h]) @ W.T): W.T's rows split where u's features end."""
        wt = self.weight_t
        if self.split_input is None:
            return self.b.op("transpose", [wt], dim0=0, dim1=1), None
        u, state_side = self.split_input
        rows = self.b.sym("sym_size", [wt], wt.shape[0], dim=0)
        if state_side == 1:  # cat([u, h]): u's rows first
            split = self.b.sym("sym_size", [self.batched[u]], u.shape[1], dim=2)
            ih = self.b.op("slice", [wt], dim=0, start=0, stop=split, step=1)
            hh = self.b.op("slice", [wt], dim=0, start=split, stop=rows, step=1)
        else:
            split = self.b.sym("sym_size", [wt], wt.shape[1], dim=1)
            hh = self.b.op("slice", [wt], dim=0, start=0, stop=split, step=1)
            ih = self.b.op("slice", [wt], dim=0, start=split, stop=rows, step=1)
        return self.b.op("transpose", [hh], dim0=0, dim1=1), ih

    # -- the ops of every step at once -------------------------------------------------------------------------
    def _arg(self, v: Any) -> Any:
        return self.batched.get(v, v) if isinstance(v, Value) else v

    def _is_batched(self, v: Any) -> bool:
        return isinstance(v, Value) and v in self.batched

    def _batch(self, op: Op) -> None:
        """The op over every step: its time dim at `time` like every value it reads that varies by step."""
        if op.name == "select" and op.out in self.local and self._moves(self.local[op.out], "index"):
            self.sequence = op.args[0]
            self.batched[op.out] = op.args[0]
            return
        rank = op.out.rank  # of one step's value
        args = [self._arg(a) for a in op.args]
        if op.name in POINTWISE and op.name not in INDEX:
            for a in op.args:
                if isinstance(a, Value) and a.is_tensor and not self._is_batched(a) and a.rank > rank - self.time:
                    raise NotRecurrence(f"{op.name} broadcasts a tensor against the time dim")
            if any(isinstance(a, Value) and a.is_tensor and self._is_batched(a) and a.rank != rank for a in op.args):
                raise NotRecurrence(f"{op.name} broadcasts a step's value")
            self.batched[op.out] = self.b.op(op.name, args, op.origin, **op.attrs)
        elif op.name == "matmul" and self._is_batched(op.args[0]) and not self._is_batched(op.args[1]) \
                and op.args[1].rank == 2 and op.args[0].rank >= 2 and self.time < op.args[0].rank:
            self.batched[op.out] = self.b.op("matmul", args, op.origin)
        elif op.name in BATCHED_REDUCTIONS and self._is_batched(op.args[0]) and \
                all(d >= self.time for d in op.attrs["dims"]):
            dims = tuple(d + 1 for d in op.attrs["dims"])
            self.batched[op.out] = self.b.op(op.name, args, op.origin, **dict(op.attrs, dims=dims))
        else:
            raise NotRecurrence(f"{op.name} over every step")

    def _moves(self, k: int, attr: str) -> bool:
        """Whether the body's op k reads the step through `attr` (an index that moves from step to step)."""
        role = self.m.roles.get((k, ("attrs", attr)))
        return role is not None and role[0] == "moves" and role[2] != 0

    def _recurrence(self) -> Value:
        for t in self.input_terms:
            if isinstance(t, Value) and t.is_tensor and not self._is_batched(t) and t.rank > 2 - self.time:
                raise NotRecurrence("an input term that broadcasts against the time dim")
        if self.split_input is not None and not self._is_batched(self.split_input[0]):
            raise NotRecurrence("a concatenated input that does not vary by step")
        if self.split_input is None and not any(self._is_batched(t) for t in self.input_terms):
            raise NotRecurrence("no input that varies by step")
        if self.init.rank != 2 or self.time > 1:
            raise NotRecurrence("a state that is not (batch, hidden)")
        w_hh, ih = self._weights()
        terms = [self._arg(t) for t in self.input_terms]
        if ih is not None:
            terms.insert(0, self.b.op("matmul", [self.batched[self.split_input[0]], ih]))
        projected = terms[0]
        for t in terms[1:]:
            projected = self.b.op("add", [projected, t])
        if not isinstance(projected, Value) or projected.rank != 3:
            raise NotRecurrence("a projection that is not (time, batch, hidden)")
        zero = self.init.producer is not None and self.init.producer.name == "full" and \
            self.init.producer.attrs.get("value") == 0
        flags = {"reverse": True} if self.reverse else {}
        states = self.b.op("recurrent", [projected, w_hh, None, None if zero else self.init, None], kind=self.kind,
                           time=self.time, hidden=w_hh.shape[0], **flags)
        return self.b.op("select", [states], dim=0, index=0)

    # -- the graph around it -----------------------------------------------------------------------------------
    def _joined(self, kept: list[Op]) -> Graph:
        m, graph = self.m, self.graph
        end = m.start + m.period * m.count
        after = graph.ops[end:]
        slots, dropped = _collect(m, after)
        replace: dict[Value, Value] = {}
        for slot in slots:
            if not slot.stacked or slot.dim != self.time or slot.reverse != self.reverse \
                    or slot.value not in self.batched:
                raise NotRecurrence("a stack of the steps' values that is not the sequence's order")
            replace[slot.collected] = self.batched[slot.value]
        last = -1 if not self.reverse else 0
        rewired = [op for op in after if op not in dropped]
        for v in [v for op in rewired for _, v in _values(op)] + list(graph.outputs):
            if v in m.where and v not in replace:  # a step's value read after the loop: the last step's
                replace[v] = self._last_step(v, last)
        for op in rewired:
            op.args = substituted(op.args, replace)
            op.attrs = {key: substituted(v, replace) for key, v in op.attrs.items()}
        outputs = [replace.get(v, v) for v in graph.outputs]
        if self.sequence is not None:  # the recurrence runs for the sequence's length, whatever it is
            follow_length(graph.ops, self.sequence, self.time)
        ops = graph.ops[:m.start] + kept + self.b.graph.ops + rewired
        return dead_code_eliminated(Graph(list(graph.inputs), dict(graph.params), ops, outputs, graph.output_kind))

    def _last_step(self, v: Value, last: int) -> Value:
        j, k = self.m.where[v]
        if j != self.m.count - 1:
            raise NotRecurrence("a middle step's value read after the loop")
        first = self.body[k].out
        if self.dep[k] == INVARIANT:
            return first
        if first not in self.batched:
            raise NotRecurrence("a value inside the cell read after the loop")
        return self.b.op("select", [self.batched[first]], dim=self.time, index=last)

