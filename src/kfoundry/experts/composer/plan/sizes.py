"""Which sizes of a graph are equal at every size set, not only at the traced one (where two unrelated sizes may
happen to be equal): the planner puts values in one kernel, indexed by the same coordinates, only where they are.

A value's sizes are the host's expressions of them (HostContext.formula: in terms of forward's inputs, the
parameters and the host numbers). Two dims have the same size when their expressions are the same, or when an op
of the graph broadcasts them together (the reference itself needs them equal to run: `linear(x) * sigmoid(gate)`
makes the gate's columns the weight's rows)."""

from __future__ import annotations

from kfoundry.experts.composer.emit.host import HostContext
from kfoundry.experts.composer.ir.builder import aligned
from kfoundry.experts.composer.ir.graph import LAYOUTS, POINTWISE, Graph, Op, Value
from kfoundry.experts.composer.plan.steps import Plan


class SameSizes:
    def __init__(self, graph: Graph) -> None:
        self.host = HostContext(Plan(graph, []))  # the host's expressions of a graph not yet planned
        self.parent: dict[str, str] = {}
        for op in graph.ops:
            self._relate(op)

    def same(self, a: Value, i: int, b: Value, j: int) -> bool:
        """a's dim i and b's dim j have the same size at every size set."""
        return a.shape[i] == b.shape[j] and self._root(self.host.formula(a)[i]) == self._root(self.host.formula(b)[j])

    def same_shape(self, a: Value, b: Value) -> bool:
        return a.rank == b.rank and all(self.same(a, i, b, i) for i in range(a.rank))

    def broadcasts_into(self, small: Value, big: Value) -> bool:
        """small's shape broadcasts to big's at every size set (right-aligned, its dims of size 1 aside)."""
        offset = big.rank - small.rank
        return offset >= 0 and all(s == 1 or self.same(small, i, big, i + offset) for i, s in enumerate(small.shape))

    def _relate(self, op: Op) -> None:
        """Join the sizes op broadcasts together: a pointwise op's operands and result, a product's inner dims, the
        dims a concatenation does not join along."""
        out = op.out
        if op.name in POINTWISE and op.name not in LAYOUTS or op.name == "cat":
            for arg in op.tensor_args:
                for i, j in enumerate(aligned(arg.rank, out.rank)):
                    if arg.shape[i] != 1 and not (op.name == "cat" and j == op.attrs["dim"]):
                        self._join(arg, i, out, j)
        elif op.name == "matmul":
            a, b = op.args
            self._join(a, a.rank - 1, b, b.rank - 2)

    def _join(self, a: Value, i: int, b: Value, j: int) -> None:
        root, other = self._root(self.host.formula(a)[i]), self._root(self.host.formula(b)[j])
        if root != other:
            self.parent[root] = other

    def _root(self, size: str) -> str:
        while size in self.parent:
            size = self.parent[size]
        return size
