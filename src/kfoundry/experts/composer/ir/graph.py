"""The composer's op IR: a problem's forward as a list of primitive ops on values with shapes and dtypes.

Values are tensors (forward inputs, the module's parameters and buffers by attribute path, op results),
host numbers derived from shapes or read from the module's attributes at call time (`sym`), or forward arguments
that are not tensors (`const`). A host number the reader had to take at its traced value (a kernel built around
it) is `assumed`: the candidate checks at call time that it still holds, so that other sizes raise a clear
error instead of computing something else. Every
op is a primitive the kernel templates know: composite PyTorch ops (linear, softmax, the norms, ...)
are decomposed into these when the trace is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

INPUT, PARAM, TENSOR, SYM, CONST = "input", "param", "tensor", "sym", "const"

UNARY = frozenset({
    "identity", "neg", "abs", "relu", "relu6", "sigmoid", "tanh", "exp", "exp2", "log", "log2", "log10", "log1p",
    "expm1", "sqrt", "rsqrt", "reciprocal", "square", "sin", "cos", "erf", "floor", "ceil", "round", "trunc",
    "sign", "silu", "mish", "selu", "softsign", "hardswish", "hardsigmoid", "logsigmoid", "logical_not",
    "gelu", "leaky_relu", "elu", "softplus", "clamp", "cast", "threshold",
})
BINARY = frozenset({
    "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
    "logical_and", "logical_or", "remainder", "fmod",
})
TERNARY = frozenset({"where"})
# iota(x, dim): each element's index along dim (x gives only the shape): picks a class in cross-entropy;
# full(sizes=, value=, dtype=, fixed_dtype=): every element the same number (zeros, ones, a state starting at 0)
INDEX = frozenset({"iota", "full"})
POINTWISE = UNARY | BINARY | TERNARY | INDEX
COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not"})
REDUCTIONS = frozenset({"sum", "mean", "amax", "amin", "argmax", "argmin"})
GEMMS = frozenset({"matmul"})
CONVS = frozenset({"conv"})
POOLS = frozenset({"max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool"})
# along attrs["dim"]; attrs "reverse" (from the end) and "exclusive" (each element's scan leaves it out) default False
SCANS = frozenset({"cumsum", "cumprod"})
# read their inputs at moved coordinates along some dims (`moved_dims`): flip(dims=), roll(moves=((dim, shift),)),
# pad(moves=((dim, before, after),), mode=, value=), cat(tensors..., dim=); each starts a pointwise kernel
LAYOUTS = frozenset({"flip", "roll", "pad", "cat"})
# recurrent(projected, w_hh, b_hh | None, h0 | None, c0 | None, kind=, time=, hidden=): one layer of an LSTM, GRU or
# RNN over the steps along dim `time` of the input's projection; the result stacks the hidden states of every
# step (and an LSTM's cell states) along a new first dim
RECURRENT = frozenset({"recurrent"})
# unfold(dim=, size=, step=): windows along dim as a last dim of their own (overlapping where step < size)
VIEWS = frozenset({"reshape", "permute", "transpose", "unsqueeze", "squeeze", "expand", "flatten", "slice",
                   "select", "unfold"})
# sym_attr(path=): a number the module holds (self.scale, self.norm.num_groups), read when forward runs
SYMS = frozenset({"sym_size", "sym_numel", "sym_dim", "sym_attr", "sym_add", "sym_sub", "sym_mul", "sym_floordiv",
                  "sym_mod", "sym_neg", "sym_truediv", "sym_pow"})
RESHAPES = frozenset({"reshape", "flatten", "unsqueeze", "squeeze"})  # views that keep the element order
SHAPE_QUERIES = frozenset({"sym_size", "sym_numel"})  # they read a tensor's shape, which the host computes itself
ALL_OPS = POINTWISE | REDUCTIONS | GEMMS | CONVS | POOLS | SCANS | LAYOUTS | RECURRENT | VIEWS | SYMS


@dataclass(eq=False)
class Value:
    name: str
    kind: str
    shape: tuple[int, ...] = ()
    dtype: torch.dtype | None = None
    fixed_dtype: bool = False  # set by the program (a cast, an index), not by the evaluation's precision
    placed_dim: int | None = None  # written into a slice along this dim of a concatenation (the planner's choice)
    path: str | None = None  # PARAM: attribute path on the module ("conv.weight", "layers.0.bias")
    index: int | None = None  # INPUT / CONST: position among forward's arguments
    producer: Op | None = None
    concrete: Any = None  # SYM / CONST: the value the sample run saw
    assumed: bool = False  # SYM: the candidate is built for `concrete` only (checked when forward runs)

    @property
    def is_tensor(self) -> bool:
        return self.kind in (INPUT, PARAM, TENSOR)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_float(self) -> bool:
        return self.dtype is not None and self.dtype.is_floating_point

    def __repr__(self) -> str:
        return f"%{self.name}{list(self.shape) if self.is_tensor else ''}"


@dataclass(eq=False)
class Op:
    name: str
    args: list[Any]  # Values, Python scalars, or tuples of them (a reshape's sizes)
    attrs: dict[str, Any]
    out: Value
    origin: str = ""  # the traced node it came from, for messages

    @property
    def tensor_args(self) -> list[Value]:
        return [a for a in self.args if isinstance(a, Value) and a.is_tensor]

    @property
    def inputs(self) -> list[Value]:
        """Every value the op reads: its arguments and the sizes among its attributes."""
        return flat_values(self.args) + flat_values(list(self.attrs.values()))

    def __repr__(self) -> str:
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        return f"{self.out!r} = {self.name}({', '.join(map(repr, self.args))}{', ' + attrs if attrs else ''})"


@dataclass
class Graph:
    inputs: list[Value] = field(default_factory=list)  # forward's arguments, in order
    params: dict[str, Value] = field(default_factory=dict)  # attribute path -> value
    ops: list[Op] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    output_kind: str = "tensor"  # "tensor" (one), "tuple" or "list"

    def users(self) -> dict[Value, list[Op]]:
        found: dict[Value, list[Op]] = {}
        for op in self.ops:
            for arg in op.inputs:
                found.setdefault(arg, []).append(op)
        return found

    def data_users(self) -> dict[Value, list[Op]]:
        """The users that read each value's data (a size query needs only its shape)."""
        return {v: [op for op in ops if op.name not in SHAPE_QUERIES] for v, ops in self.users().items()}

    def dump(self) -> str:
        lines = [f"inputs: {self.inputs}", f"params: {list(self.params)}"]
        lines += [repr(op) for op in self.ops]
        lines.append(f"outputs: {self.outputs}")
        return "\n".join(lines)


def number(value: Any) -> Any:
    """The traced value of a host number (a plain number is its own)."""
    return value.concrete if isinstance(value, Value) else value


def flat_values(args: Any) -> list[Value]:
    """The Values among an op's arguments, nested tuples and lists included."""
    if isinstance(args, Value):
        return [args]
    if isinstance(args, (list, tuple)):
        return [v for a in args for v in flat_values(a)]
    return []


def category(name: str) -> str:
    for label, names in (("pointwise", POINTWISE), ("reduction", REDUCTIONS), ("gemm", GEMMS), ("conv", CONVS),
                         ("pool", POOLS), ("scan", SCANS), ("layout", LAYOUTS), ("recurrent", RECURRENT),
                         ("view", VIEWS), ("sym", SYMS)):
        if name in names:
            return label
    raise KeyError(name)


def moved_dims(op: Op) -> tuple[int, ...]:
    """The dims along which a layout op reads its inputs somewhere else than where it writes."""
    if op.name == "flip":
        return tuple(op.attrs["dims"])
    if op.name in ("roll", "pad"):
        return tuple(move[0] for move in op.attrs["moves"])
    if op.name == "cat":
        return (op.attrs["dim"],)
    raise KeyError(op.name)


def dead_code_eliminated(graph: Graph) -> Graph:
    """The graph without ops whose results nothing uses (a size query keeps no tensor computed); an assumed size
    is used by the check of it."""
    live = set(graph.outputs)
    kept = []
    for op in reversed(graph.ops):
        if op.out in live or op.out.assumed:
            kept.append(op)
            live.update(v for v in op.inputs if not (op.name in SHAPE_QUERIES and v.is_tensor))
    graph.ops = kept[::-1]
    return graph
