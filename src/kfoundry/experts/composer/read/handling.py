"""What the readers and their handler modules share: what a handler may ask of the reader that calls it
(`Reader`), the table a handler module fills, the error a handler raises for what the composer lacks, and the
helpers that bind and convert a call's arguments."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import torch

from kfoundry.experts.composer.ir.builder import GraphBuilder
from kfoundry.experts.composer.ir.graph import CONST, SYM, Value


class Reader(Protocol):
    """The reader as its handlers see it (lower_fx.FxReader, and lower_aten.AtenReader built on it): the graph
    builder, the node being read (its handler key, its readable origin), the model's modules and state, the
    handler of another key, and the building blocks every handler shares."""

    b: GraphBuilder
    key: str  # the handler key of the node being read ("add", "max", "nn.Linear", ...)

    @property
    def origin(self) -> str: ...

    def module(self, path: str) -> torch.nn.Module: ...

    def handler(self, key: str) -> Callable | None: ...

    def attr(self, prefix: str, name: str) -> Value: ...

    def config(self, prefix: str, name: str) -> Any: ...

    def state(self, prefix: str, name: str) -> Value | None: ...

    def op(self, name: str, args: list, **attrs: Any) -> Value: ...

    def tensor(self, value: Any, what: str = "input") -> Value: ...

    def unary(self, name: str, args: tuple, kwargs: dict) -> Any: ...

    def binary(self, name: str, args: tuple, kwargs: dict, alpha: Any = 1) -> Any: ...

    def sym_binary(self, name: str, x: Any, y: Any) -> Any: ...

    def size_of(self, x: Value, dim: int) -> Value: ...

    def sizes_of(self, x: Value) -> tuple: ...


class Unsupported(Exception):
    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(f"{name}: {detail}" if detail else name)
        self.name = name
        self.detail = detail


class HandlerTable(dict[str, Callable]):
    """One handler module's handlers by key: an op's name ("add", "max"), or "nn." and a module class's name.
    The reader dispatches to the tables of its handler modules, merged (lower_fx.HANDLER_MODULES)."""

    def handles(self, *keys: str) -> Callable[[Callable], Callable]:
        def register(fn: Callable) -> Callable:
            for key in keys:
                self[key] = fn
            return fn
        return register


def bind(args: tuple, kwargs: dict, names: str) -> dict[str, Any]:
    """Match a call's arguments to a signature written as 'input, dim=None, keepdim=False'."""
    spec: list[tuple[str, Any]] = []
    for part in names.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, default = part.partition("=")
        spec.append((name.strip(), eval(default, {"math": math}) if sep else _REQUIRED))
    if len(args) > len(spec):
        raise TypeError(f"{len(args)} positional arguments where at most {len(spec)} are known")
    out = {name: default for name, default in spec}
    for (name, _), value in zip(spec, args):
        out[name] = value
    for key, value in kwargs.items():
        if key not in out:
            raise TypeError(f"unknown argument {key!r}")
        out[key] = value
    missing = [k for k, v in out.items() if v is _REQUIRED]
    if missing:
        raise TypeError(f"missing argument(s) {', '.join(missing)}")
    return out


_REQUIRED = object()


def scalar_of(value: Any, what: str = "argument") -> Any:
    """The number a handler builds its ops around: a host number (a size, a module's attribute) is taken at its
    traced value, which the candidate then checks when it runs."""
    if isinstance(value, Value) and value.kind == SYM:
        value.assumed = True
    return traced(value, what)


def traced(value: Any, what: str = "argument") -> Any:
    """The value the sample run saw (a host number's, without building anything around it)."""
    if isinstance(value, Value):
        if value.kind in (SYM, CONST):
            return value.concrete
        raise Unsupported(what, "a tensor where the composer needs a constant")
    return value


def operand(value: Any, convert=float) -> Any:
    """A number an op computes with: a host number stays one (read when forward runs), a constant is converted."""
    return value if isinstance(value, Value) and value.kind == SYM else convert(value)


def _nested(value: Any, leaf) -> Any:
    """`value` rebuilt with `leaf` applied to each host number in it (nested in tuples, lists, dicts and slices)."""
    if isinstance(value, Value) and value.kind == SYM:
        return leaf(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_nested(v, leaf) for v in value)
    if isinstance(value, dict):
        return {k: _nested(v, leaf) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_nested(value.start, leaf), _nested(value.stop, leaf), _nested(value.step, leaf))
    return value


def concretized(value: Any) -> Any:
    """`value` with every host number in it taken at its traced value (scalar_of)."""
    return _nested(value, scalar_of)


def has_host_numbers(value: Any) -> bool:
    found = []
    _nested(value, found.append)
    return bool(found)


def ints_of(value: Any) -> tuple:
    if isinstance(value, (list, tuple, torch.Size)):
        return tuple(value)
    return (value,)


def tuple_n(value: Any, n: int) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)):
        if len(value) == 1:
            return tuple(int(scalar_of(value[0])) for _ in range(n))
        return tuple(int(scalar_of(v)) for v in value)
    return (int(scalar_of(value)),) * n
