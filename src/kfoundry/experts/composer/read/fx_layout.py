"""Handlers of ops that move elements (flip, roll, padding, concatenation and stacking) and of tensors filled
with one number inside forward (zeros, ones, full and their `_like` forms): the first become layout ops, read
by a kernel at moved coordinates; the second `full`, computed where it is used."""

from __future__ import annotations

from typing import Any

import torch

from kfoundry.experts.composer.ir.builder import norm_dim
from kfoundry.experts.composer.ir.graph import Value
from kfoundry.experts.composer.read.fx_views import call_sizes
from kfoundry.experts.composer.read.handling import HandlerTable, Reader, Unsupported, bind, ints_of, scalar_of

HANDLERS = HandlerTable()  # this module's handlers: lower_fx merges them into the reader's
handles = HANDLERS.handles

PAD_MODES = ("constant", "reflect", "replicate", "circular")


# -- moves ----------------------------------------------------------------------------------------------
@handles("flip")
def _flip(r: Reader, x, *dims, **kwargs):
    x = r.tensor(x)
    dims = call_sizes(dims or (kwargs.get("dims", ()),))
    return flip(r, x, dims)


@handles("fliplr", "flipud")
def _flip_lr_ud(r: Reader, x):
    x = r.tensor(x)
    return flip(r, x, (1,) if r.key == "fliplr" else (0,))


def flip(r: Reader, x: Value, dims: tuple) -> Value:
    dims = tuple(sorted({norm_dim(int(scalar_of(d)), x.rank) for d in dims}))
    if not dims:
        return x
    return r.op("flip", [x], dims=dims)


@handles("roll")
def _roll(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, shifts, dims=None")
    x = r.tensor(a["input"])
    if a["dims"] is None:
        raise Unsupported(r.origin or "torch.roll", "a roll of the flattened tensor (no dims)")
    shifts, dims = ints_of(a["shifts"]), ints_of(a["dims"])
    if len(shifts) != len(dims):
        raise Unsupported(r.origin or "torch.roll", f"{len(shifts)} shifts for {len(dims)} dims")
    total: dict[int, Any] = {}
    for shift, dim in zip(shifts, dims):
        dim = norm_dim(int(scalar_of(dim)), x.rank)
        total[dim] = r.sym_binary("add", total.get(dim, 0), shift)
    # a shift the host computes stays, though it moves nothing here: at other sizes it may
    moves = tuple((dim, shift) for dim, shift in sorted(total.items())
                  if isinstance(shift, Value) or shift % max(x.shape[dim], 1))
    return r.op("roll", [x], moves=moves) if moves else x


@handles("pad")
def _pad(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, pad, mode='constant', value=None")
    return pad(r, r.tensor(a["input"]), ints_of(a["pad"]), a["mode"], a["value"])


def pad(r: Reader, x: Value, widths: tuple, mode: str, value: Any = None) -> Value:
    """F.pad's (left, right, top, bottom, ...) widths, from the last dim back, as a pad op."""
    what = r.origin or "F.pad"
    widths = tuple(int(scalar_of(w)) for w in widths)
    if len(widths) % 2 or len(widths) // 2 > x.rank:
        raise Unsupported(what, f"{len(widths)} padding widths for a tensor of {x.rank} dims")
    if mode not in PAD_MODES:
        raise Unsupported(what, f"mode={mode!r}")
    value = 0.0 if value is None else float(scalar_of(value))
    if mode != "constant" and value:
        raise Unsupported(what, f"value={value} with mode={mode!r}")
    moves = []
    for k in range(len(widths) // 2):
        dim, before, after = x.rank - 1 - k, widths[2 * k], widths[2 * k + 1]
        if before or after:
            if mode != "constant" and (min(before, after) < 0 or max(before, after) > x.shape[dim]
                                       or mode == "reflect" and max(before, after) >= x.shape[dim]):
                raise Unsupported(what, f"{mode} padding of {before}, {after} on a dim of {x.shape[dim]}")
            moves.append((dim, before, after))
    if not moves:
        return x
    return r.op("pad", [x], moves=tuple(sorted(moves)), mode=mode, value=value)


@handles("cat", "concat", "concatenate")
def _cat(r: Reader, tensors, dim=0, axis=None, **kwargs):
    kwargs.pop("out", None)
    return cat(r, list(tensors), int(scalar_of(dim if axis is None else axis)))


def cat(r: Reader, tensors: list, dim: int) -> Value:
    values = [r.tensor(t, "a tensor to concatenate") for t in tensors]
    # torch skips 1-D empty tensors in a concatenation of tensors of more dims (a legacy rule)
    values = [v for v in values if not (v.rank == 1 and v.shape == (0,) and any(u.rank > 1 for u in values))]
    if not values:
        raise Unsupported(r.origin or "torch.cat", "nothing to concatenate")
    dim = norm_dim(dim, values[0].rank)
    values = [v for v in values if v.shape[dim] != 0] or values[:1]
    return values[0] if len(values) == 1 else r.op("cat", values, dim=dim)


@handles("stack")
def _stack(r: Reader, tensors, dim=0, **kwargs):
    kwargs.pop("out", None)
    values = [r.tensor(t, "a tensor to stack") for t in tensors]
    if not values:
        raise Unsupported(r.origin or "torch.stack", "nothing to stack")
    dim = norm_dim(int(scalar_of(dim)), values[0].rank + 1)
    return cat(r, [r.op("unsqueeze", [v], dim=dim) for v in values], dim)


@handles("nn.ZeroPad1d", "nn.ZeroPad2d", "nn.ZeroPad3d", "nn.ConstantPad1d", "nn.ConstantPad2d",
         "nn.ConstantPad3d", "nn.ReflectionPad1d", "nn.ReflectionPad2d", "nn.ReflectionPad3d",
         "nn.ReplicationPad1d", "nn.ReplicationPad2d", "nn.ReplicationPad3d", "nn.CircularPad1d",
         "nn.CircularPad2d", "nn.CircularPad3d")
def _m_pad(r: Reader, m, path, x):
    mode = pad_mode(type(m).__name__)
    return pad(r, r.tensor(x), tuple(m.padding), mode, getattr(m, "value", None) if mode == "constant" else None)


def pad_mode(name: str) -> str:
    """The F.pad mode of a padding module or ATen op: ReflectionPad2d, replication_pad1d, _pad_circular, ..."""
    name = name.lower().lstrip("_")
    for prefix, mode in (("reflection", "reflect"), ("replication", "replicate"), ("circular", "circular"),
                         ("pad_circular", "circular")):
        if name.startswith(prefix):
            return mode
    return "constant"


# -- random numbers ----------------------------------------------------------------------------------------
@handles("rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "randperm", "normal", "bernoulli",
         "multinomial", "uniform_", "normal_")
def _random(r: Reader, *args, **kwargs):
    raise Unsupported(r.origin or f"torch.{r.key}", "random numbers drawn in forward: no kernel reproduces "
                      "PyTorch's generator, so no candidate's output could be checked against the reference")


# -- tensors of one number --------------------------------------------------------------------------------
def full(r: Reader, sizes: tuple, value: Any, dtype: torch.dtype | None, like: Value | None = None) -> Value:
    """A tensor of `sizes` filled with `value`. The `_like` and `new_` forms take `like`'s dtype, and follow the
    evaluated precision with it; the others make PyTorch's default dtype whatever the inputs are (torch.zeros in
    a model run in fp16 is still fp32), or the dtype given."""
    if isinstance(value, Value):
        if value.is_tensor:
            raise Unsupported(r.origin or "torch.full", "a fill value that is a tensor")
        value = scalar_of(value)
    if like is not None and (dtype is None or dtype == like.dtype):
        dtype, fixed = like.dtype, like.fixed_dtype
    else:
        if dtype is None:
            dtype = torch.get_default_dtype() if isinstance(value, float) or value is None else \
                torch.bool if isinstance(value, bool) else torch.int64
        fixed = True
    return r.op("full", [], sizes=tuple(sizes), value=0 if value is None else value, dtype=dtype, fixed_dtype=fixed)


def _sizes(args: tuple, kwargs: dict) -> tuple:
    return tuple(kwargs.pop("size")) if "size" in kwargs else call_sizes(args)


_FACTORY_KEYWORDS = ("device", "layout", "pin_memory", "requires_grad", "memory_format", "out")


def _factory_kwargs(kwargs: dict) -> torch.dtype | None:
    for key in _FACTORY_KEYWORDS:
        kwargs.pop(key, None)
    dtype = kwargs.pop("dtype", None)
    if kwargs:
        raise Unsupported("a tensor factory", f"unknown argument(s) {', '.join(kwargs)}")
    return dtype


@handles("zeros", "ones")
def _zeros_ones(r: Reader, *args, **kwargs):
    sizes = _sizes(args, kwargs)
    dtype = _factory_kwargs(kwargs)
    return full(r, sizes, 0.0 if r.key == "zeros" else 1.0, dtype)


@handles("full")
def _full(r: Reader, size, fill_value, **kwargs):
    dtype = _factory_kwargs(kwargs)
    return full(r, tuple(size), fill_value, dtype)


@handles("zeros_like", "ones_like", "full_like")
def _like(r: Reader, x, *args, **kwargs):
    x = r.tensor(x)
    if r.key == "full_like":
        value = kwargs.pop("fill_value") if "fill_value" in kwargs else args[0]
    else:
        value = 0.0 if r.key == "zeros_like" else 1.0
    dtype = _factory_kwargs(kwargs)
    return full(r, r.sizes_of(x), value, dtype, like=x)


@handles("new_zeros", "new_ones", "new_full")
def _new(r: Reader, x, *args, **kwargs):
    x = r.tensor(x)
    if r.key == "new_full":
        a = bind(args, {k: kwargs.pop(k) for k in ("size", "fill_value") if k in kwargs}, "size, fill_value")
        sizes, value = tuple(a["size"]), a["fill_value"]
    else:
        sizes, value = _sizes(args, kwargs), 0.0 if r.key == "new_zeros" else 1.0
    dtype = _factory_kwargs(kwargs)
    return full(r, sizes, value, dtype, like=x)
