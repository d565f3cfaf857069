"""Reading a torch.fx trace into the composer's IR.

Each node (call_function, call_method, call_module) maps to a handler keyed by the op's name; composite ops
are decomposed (`decompose`, `norm`). Whatever has no handler, or a handler refuses (dropout in training
mode, advanced indexing, ...), is collected as `unsupported` by a readable name; nodes downstream of it are
skipped so that one message lists every op the composer lacks. Every result is checked against the shape
the sample run saw.
"""

from __future__ import annotations

import builtins
import math
import operator
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from kfoundry.experts.composer.ir.builder import (
    GraphBuilder,
    ShapeError,
    norm_dim,
)
from kfoundry.experts.composer.ir.graph import PARAM, SYM, Graph, Value, dead_code_eliminated, flat_values
from kfoundry.experts.composer.read import fx_attention, fx_functions, fx_layout, fx_modules, fx_views, recurrent
from kfoundry.experts.composer.read.handling import (
    Unsupported,
    bind,
    concretized,
    has_host_numbers,
    scalar_of,
    traced,
)
from kfoundry.experts.composer.read.trace import TensorMeta, Trace

_MISSING = object()
LIFTED_CONSTANT = re.compile(r"_tensor_constant\d+")


class ReadFailed(Exception):
    """The trace holds ops the composer cannot handle."""

    def __init__(self, unsupported: dict[str, str]) -> None:
        super().__init__(", ".join(unsupported))
        self.unsupported = unsupported


class _Poison:
    """Stands for a value downstream of an unsupported op."""


POISON = _Poison()
READ_ERRORS = (Unsupported, ShapeError, ValueError, TypeError, KeyError, IndexError, AttributeError)

HANDLER_MODULES = (fx_functions, fx_modules, fx_views, fx_layout, recurrent, fx_attention)
# what the reader dispatches to by key: the handler tables of HANDLER_MODULES, merged in that order
HANDLERS: dict[str, Callable] = {key: fn for module in HANDLER_MODULES for key, fn in module.HANDLERS.items()}

UNARY_FUNCTIONS = {
    "abs": "abs", "absolute": "abs", "neg": "neg", "negative": "neg", "relu": "relu", "relu6": "relu6",
    "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2",
    "log10": "log10", "log1p": "log1p", "expm1": "expm1", "sqrt": "sqrt", "rsqrt": "rsqrt",
    "reciprocal": "reciprocal", "square": "square", "sin": "sin", "cos": "cos", "erf": "erf", "floor": "floor",
    "ceil": "ceil", "round": "round", "trunc": "trunc", "sign": "sign", "silu": "silu", "mish": "mish",
    "selu": "selu", "softsign": "softsign", "hardswish": "hardswish", "hardsigmoid": "hardsigmoid",
    "logsigmoid": "logsigmoid", "logical_not": "logical_not", "contiguous": "identity", "clone": "identity",
    "detach": "identity", "positive": "identity", "pos": "identity", "invert": "logical_not",
    "expit": "sigmoid", "fix": "trunc",
}
BINARY_FUNCTIONS = {
    "mul": "mul", "multiply": "mul", "div": "div", "divide": "div", "true_divide": "div", "truediv": "div",
    "maximum": "maximum", "minimum": "minimum", "fmax": "maximum", "fmin": "minimum", "eq": "eq", "ne": "ne",
    "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "greater": "gt", "less": "lt", "greater_equal": "ge",
    "less_equal": "le", "not_equal": "ne", "logical_and": "logical_and", "logical_or": "logical_or",
    "and_": "logical_and", "or_": "logical_or", "remainder": "remainder", "mod": "remainder", "fmod": "fmod",
    "floor_divide": "floordiv", "floordiv": "floordiv", "pow": "pow", "float_power": "pow",
}
SYM_BINARY = {"add": "sym_add", "sub": "sym_sub", "mul": "sym_mul", "floordiv": "sym_floordiv",
              "remainder": "sym_mod", "div": "sym_truediv", "pow": "sym_pow"}
_PY_BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
              "floordiv": operator.floordiv, "remainder": operator.mod, "pow": operator.pow, "maximum": max,
              "minimum": min, "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
              "gt": operator.gt, "ge": operator.ge, "fmod": math.fmod}
def _function_keys() -> dict[Any, str]:
    """Callables found in traces -> the handler key (the function's name)."""
    keys: dict[Any, str] = {}
    names = set(HANDLERS) | set(UNARY_FUNCTIONS) | set(BINARY_FUNCTIONS) | {"add", "sub", "subtract", "rsub"}
    for module in (F, torch, torch.special, torch.linalg):
        for name in names:
            fn = getattr(module, name, None)
            if callable(fn) and not isinstance(fn, type):
                keys.setdefault(fn, name)
    for name in names:
        fn = getattr(torch.Tensor, name, None)
        if callable(fn):
            keys.setdefault(fn, name)
    for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "matmul", "getitem",
                 "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "invert", "abs"):
        keys[getattr(operator, name)] = name
    keys[builtins.getattr] = "getattr"
    return keys


_KEYS: dict[Any, str] | None = None


def function_key(target: Any) -> str | None:
    global _KEYS
    if _KEYS is None:
        _KEYS = _function_keys()
    try:
        return _KEYS.get(target)
    except TypeError:  # unhashable target
        return None


def describe(node: torch.fx.Node) -> str:
    """A readable name for the op a node runs: torch.sort, Tensor.topk, nn.LSTM, aten.cumsum."""
    if node.op == "call_module":
        return f"nn.{type(node.graph.owning_module.get_submodule(node.target)).__name__}"
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target._overloadpacket.__name__}"
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", str(target))
    if module.startswith("torch.nn.functional") or module == "torch._C._nn":
        return f"F.{name}"
    if module in ("_operator", "operator"):
        return f"operator.{name}"
    if module.startswith(("torch._C._fft", "torch.fft")):
        return f"torch.fft.{name.removeprefix('fft_')}"
    if module.startswith(("torch._C._linalg", "torch.linalg")):
        return f"torch.linalg.{name.removeprefix('linalg_')}"
    if module.startswith(("torch._C._special", "torch.special")):
        return f"torch.special.{name.removeprefix('special_')}"
    if module.startswith("torch"):
        return f"torch.{name}"
    return f"{module}.{name}" if module else name


class FxReader:
    """Turns a Trace of torch-level nodes into a Graph; `read()` raises ReadFailed listing what it lacks."""

    def __init__(self, trace: Trace, eval_mode: bool = False) -> None:
        self.trace = trace
        self.eval_mode = eval_mode
        self.b = GraphBuilder()
        self.env: dict[torch.fx.Node, Any] = {}
        self.unsupported: dict[str, str] = {}
        self.node: torch.fx.Node | None = None
        self.key = ""  # the handler key of the node being read ("add", "max", "nn.Linear", ...)

    # -- the walk ---------------------------------------------------------------------------------
    def read(self) -> Graph:
        graph = self.trace.graph_module.graph
        live = self._live(graph)
        for path, value in self.trace.baked.items():
            self.b.sym("sym_attr", [], value, hint=path, path=path).assumed = True
        for node in graph.nodes:
            self.node = node
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node)
            elif node.op == "get_attr":
                try:
                    self.env[node] = self._get_attr(node.target)
                except Unsupported as exc:
                    self.unsupported.setdefault(exc.name, exc.detail)
                    self.env[node] = POISON
            elif node.op == "output":
                self._output(node)
            elif node in live:
                self.env[node] = self._visit(node)
        for node, dim, _ in self.trace.fixed_dims:
            if isinstance(self.env.get(node), Value):
                self.size_of(self.env[node], dim).assumed = True
        if self.unsupported:
            raise ReadFailed(self.unsupported)
        return dead_code_eliminated(self.b.graph)

    def _live(self, graph: torch.fx.Graph) -> set:
        live: set = set()
        for node in reversed(graph.nodes):
            mutated = self._mutated(node)
            if node.op == "output" or node in live or (mutated is not None and mutated in live):
                live.add(node)
                live.update(n for n in node.all_input_nodes)
        return live

    def _mutated(self, node: torch.fx.Node) -> torch.fx.Node | None:
        """The node whose tensor an in-place op overwrites."""
        if node.op not in ("call_function", "call_method", "call_module") or not node.args:
            return None
        first = node.args[0]
        if not isinstance(first, torch.fx.Node):
            return None
        if node.op == "call_method" and node.target.endswith("_") and not node.target.endswith("__"):
            return first
        if node.kwargs.get("inplace") is True:
            return first
        if node.op == "call_module" and getattr(self.module(node.target), "inplace", False) is True:
            return first
        if isinstance(node.target, torch._ops.OpOverload) and node.target._overloadpacket.__name__.endswith("_"):
            return first
        return None

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return self.env.get(value, POISON)
        if isinstance(value, (list, tuple)):
            items = [self._resolve(v) for v in value]
            return tuple(items) if isinstance(value, tuple) else items
        if isinstance(value, dict):
            return {k: self._resolve(v) for k, v in value.items()}
        if isinstance(value, slice):
            return slice(self._resolve(value.start), self._resolve(value.stop), self._resolve(value.step))
        return value

    @staticmethod
    def _poisoned(value: Any) -> bool:
        if value is POISON:
            return True
        if isinstance(value, (list, tuple)):
            return any(FxReader._poisoned(v) for v in value)
        if isinstance(value, dict):
            return any(FxReader._poisoned(v) for v in value.values())
        if isinstance(value, slice):
            return any(FxReader._poisoned(v) for v in (value.start, value.stop, value.step))
        return False

    def _visit(self, node: torch.fx.Node) -> Any:
        args = self._resolve(node.args)
        kwargs = self._resolve(node.kwargs)
        if node.target is operator.getitem and isinstance(args[0], (tuple, list)) and isinstance(args[1], int):
            return args[0][args[1]]  # one result of a multi-output op: only that one needs to be readable
        if self._poisoned(args) or self._poisoned(kwargs):
            return POISON
        name = describe(node)
        try:
            result = self._attempt(node, args, kwargs)
        except READ_ERRORS as exc:
            if not has_host_numbers((args, kwargs)):
                return self._refused(name, exc)
            try:  # a handler that needs plain numbers where it got host numbers: built for their traced values
                result = self._attempt(node, concretized(args), concretized(kwargs))
            except READ_ERRORS as again:
                return self._refused(name, again)
        mutated = self._mutated(node)
        if mutated is not None and isinstance(result, Value):
            self.env[mutated] = result  # later readers of the overwritten tensor see the new value
        return result

    def _attempt(self, node: torch.fx.Node, args: Any, kwargs: Any) -> Any:
        """The node's handler run and its result checked; what it added to the graph is taken back if it fails."""
        size = len(self.b.graph.ops)
        try:
            result = self.dispatch(node, tuple(args), dict(kwargs))
            self._check(node, result)
        except READ_ERRORS:
            del self.b.graph.ops[size:]
            raise
        return result

    def _refused(self, name: str, exc: Exception) -> _Poison:
        if isinstance(exc, Unsupported):
            self.unsupported.setdefault(exc.name if exc.name not in ("argument",) else name, exc.detail)
        else:
            self.unsupported.setdefault(name, f"{type(exc).__name__}: {exc}")
        return POISON

    def dispatch(self, node: torch.fx.Node, args: tuple, kwargs: dict) -> Any:
        if node.op == "call_module":
            module = self.module(node.target)
            self.key = f"nn.{type(module).__name__}"
            handler = HANDLERS.get(self.key)
            if handler is None:
                raise Unsupported(describe(node))
            return handler(self, module, node.target, *args, **kwargs)
        if node.op == "call_method":
            key = node.target
            if key.endswith("_") and not key.endswith("__"):
                key = key[:-1]
        else:
            key = function_key(node.target)
        if key is None:
            raise Unsupported(describe(node))
        return self.call(key, args, kwargs, describe(node))

    def handler(self, key: str) -> Callable | None:
        """The handler of a key, of any handler module (a module's handler reads its children by theirs)."""
        return HANDLERS.get(key)

    def call(self, key: str, args: tuple, kwargs: dict, name: str) -> Any:
        if key in UNARY_FUNCTIONS:
            return self.unary(UNARY_FUNCTIONS[key], args, kwargs)
        if key in BINARY_FUNCTIONS:
            return self.binary(BINARY_FUNCTIONS[key], args, kwargs)
        handler = HANDLERS.get(key)
        if handler is None:
            raise Unsupported(name)
        self.key = key
        return handler(self, *args, **kwargs)

    def _check(self, node: torch.fx.Node, result: Any) -> None:
        seen = self.trace.values.get(node)
        if isinstance(result, Value) and result.is_tensor:
            if not isinstance(seen, TensorMeta):
                raise Unsupported(describe(node), "the trace saw no tensor here")
            if tuple(result.shape) != tuple(seen.shape):
                raise Unsupported(describe(node), f"shape {list(result.shape)} where the trace saw {list(seen.shape)}")
            result.dtype = seen.dtype

    def _placeholder(self, node: torch.fx.Node) -> Value:
        kind, where = self.trace.placeholders[node]
        if kind == "param":
            return self.b.param(where, self._tensor_at(where))
        return self._input(where, node.name)

    def _input(self, index: int, name: str) -> Value:
        for value in self.b.graph.inputs:
            if value.index == index:
                return value
        return self.b.input(name, index, self.trace.inputs[index])

    def _output(self, node: torch.fx.Node) -> None:
        result = self._resolve(node.args[0])
        items = list(result) if isinstance(result, (list, tuple)) else [result]
        for item in items:
            if item is POISON:
                continue
            if not (isinstance(item, Value) and item.is_tensor):
                self.unsupported.setdefault("non-tensor output", f"forward returns {type(item).__name__}")
                continue
            self.b.graph.outputs.append(item)
        self.b.graph.output_kind = self.trace.output_kind
        # inputs that the trace specialized (non-tensor arguments) are still forward's arguments
        for index, example in enumerate(self.trace.inputs):
            if not any(v.index == index for v in self.b.graph.inputs):
                self.b.input(f"arg{index}", index, example)
        self.b.graph.inputs.sort(key=lambda v: v.index)

    # -- module state ---------------------------------------------------------------------------
    def module(self, path: str) -> torch.nn.Module:
        return self.trace.model.get_submodule(path) if path else self.trace.model

    def _tensor_at(self, path: str) -> torch.Tensor:
        owner, _, attr = path.rpartition(".")
        value = getattr(self.module(owner), attr)
        if not isinstance(value, torch.Tensor):
            raise Unsupported("attribute", f"{path} is not a tensor")
        return value

    def _get_attr(self, path: str) -> Any:
        owner, _, attr = path.rpartition(".")
        value = getattr(self.module(owner), attr, _MISSING)
        if value is _MISSING or LIFTED_CONSTANT.fullmatch(attr):
            # a constant the tracer lifted out of forward (torch.tensor(0.5) becomes _tensor_constant0, on the
            # graph module or, with torch.fx, set on the model itself); a candidate has no such attribute, so
            # only a one-number one is taken, as the number it holds
            value = getattr(self.trace.graph_module, path, None) if value is _MISSING else value
            if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
                return float(value.item())
            if isinstance(value, torch.Tensor) and value.numel() > 1 and not value.is_meta and \
                    bool((value == value.flatten()[0]).all()):  # torch.zeros(3, 4) made at trace time: a fill
                number = value.flatten()[0].item()
                return self.op("full", [], sizes=tuple(value.shape), value=number, dtype=value.dtype,
                               fixed_dtype=True)
            shape = f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else "not a tensor"
            raise Unsupported("torch.tensor", f"{path}: a tensor of more than one number created in forward ({shape})")
        if isinstance(value, torch.Tensor):
            return self.b.param(path, value)
        if type(value) in (int, float):  # a number of the module's (read/numbers.py): read when forward runs
            return self.b.sym("sym_attr", [], value, self.origin, hint=path, path=path)
        return value

    def attr(self, prefix: str, name: str) -> Value:
        """A number (or tuple) a module holds, as the host reads it when forward runs."""
        path = f"{prefix}.{name}" if prefix else name
        return self.b.sym("sym_attr", [], getattr(self.module(prefix), name), self.origin, hint=path, path=path)

    def config(self, prefix: str, name: str) -> Any:
        """A module's setting that the kernels are built around: its value, which the candidate checks."""
        value = self.attr(prefix, name)
        value.assumed = True
        return value.concrete

    def state(self, prefix: str, name: str) -> Value | None:
        """A module's parameter or buffer (None when the module has none by that name)."""
        tensor = getattr(self.module(prefix), name, None)
        if tensor is None:
            return None
        return self.b.param(f"{prefix}.{name}" if prefix else name, tensor)

    # -- building blocks -------------------------------------------------------------------------
    def op(self, name: str, args: list, **attrs: Any) -> Value:
        return self.b.op(name, args, self.origin, **attrs)

    @property
    def origin(self) -> str:
        return describe(self.node) if self.node is not None and self.node.op != "output" else ""

    def tensor(self, value: Any, what: str = "input") -> Value:
        if isinstance(value, Value) and value.is_tensor:
            return value
        raise Unsupported(self.origin or what, f"expected a tensor for {what}, got {type(value).__name__}")

    def unary(self, name: str, args: tuple, kwargs: dict) -> Any:
        kwargs.pop("inplace", None)
        a = bind(args, kwargs, "input")
        x = a["input"]
        if name == "identity" and isinstance(x, (bool, int, float)):
            return x  # a copy of a constant (aten's lift_fresh_copy of torch.tensor(0.0)) is the constant
        if not isinstance(x, Value):
            return _fold_unary(self.origin, name, x)
        if name == "identity":
            return x
        return self.op(name, [self.tensor(x)])

    def binary(self, name: str, args: tuple, kwargs: dict, alpha: Any = 1) -> Any:
        kwargs = dict(kwargs)
        rounding = kwargs.pop("rounding_mode", None)
        kwargs.pop("out", None)
        a = bind(args, kwargs, "input, other")
        x, y = a["input"], a["other"]
        if name == "floordiv":
            name, rounding = "div", "floor"
        tensors = [v for v in (x, y) if isinstance(v, Value) and v.is_tensor]
        if not tensors:
            return self.sym_binary(name if rounding is None else "floordiv", x, y)
        if name == "div" and rounding is not None:
            return self.op("div", [x, y], rounding_mode=rounding)
        if name == "pow" and isinstance(y, Value) and y.kind == SYM:
            y = scalar_of(y)  # the kernel's power is written for its exponent (x * x for 2): checked when it runs
        if name == "pow" and not isinstance(y, Value) and y == 1:
            return x
        if name in ("minimum", "maximum") and len(tensors) == 1 and isinstance(x if y is tensors[0] else y, (int, float)):
            bound = float(x if y is tensors[0] else y)  # against a number (a constant built in forward): a clamp
            return self.op("clamp", [tensors[0]], min=bound if name == "maximum" else None,
                           max=bound if name == "minimum" else None)
        return self.op(name, [x, y])

    def sym_binary(self, name: str, x: Any, y: Any) -> Any:
        if not any(isinstance(v, Value) for v in (x, y)):
            return _PY_BINARY[name](x, y)
        if name not in SYM_BINARY:
            raise Unsupported(self.origin, f"{name} of sizes")
        concrete = _PY_BINARY[name](traced(x), traced(y))
        return self.b.sym(SYM_BINARY[name], [x, y], concrete, self.origin)

    def size_of(self, x: Value, dim: int) -> Value:
        return self.b.sym("sym_size", [x], x.shape[norm_dim(dim, x.rank)], self.origin, dim=norm_dim(dim, x.rank))

    def sizes_of(self, x: Value) -> tuple:
        return tuple(self.size_of(x, d) for d in range(x.rank))


def _fold_unary(origin: str, name: str, x: Any) -> float:
    """A unary op on a number (torch.log(torch.tensor(100.0)) in forward): the number it gives, computed now in
    float64 as PyTorch computes a 0-d tensor's."""
    fn = getattr(torch, name, None) or getattr(torch.special, name, None)
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not callable(fn):
        raise Unsupported(origin, f"{name} of a constant")
    return float(fn(torch.tensor(float(x), dtype=torch.float64)))


def read_graph(trace: Trace, eval_mode: bool = False) -> Graph:
    """The IR of a torch.fx trace; raises ReadFailed naming the ops it lacks."""
    graph = FxReader(trace, eval_mode).read()
    for value in flat_values([op.args for op in graph.ops]):
        if value.kind == PARAM and value.path not in graph.params:
            graph.params[value.path] = value
    return graph
