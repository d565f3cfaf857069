"""Handlers of views and sizes: reshapes, permutations, indexing with ints and slices, and the shape
queries (size, numel, getattr shape) that become host-side integers."""

from __future__ import annotations

import math
from typing import Any

import torch

from kfoundry.experts.composer.ir.builder import norm_dim
from kfoundry.experts.composer.ir.graph import Value
from kfoundry.experts.composer.read.handling import HandlerTable, Reader, Unsupported, bind, ints_of, scalar_of, traced

HANDLERS = HandlerTable()  # this module's handlers: lower_fx merges them into the reader's
handles = HANDLERS.handles


# -- views and sizes -------------------------------------------------------------------------------------
def call_sizes(args: tuple) -> tuple:
    """Sizes or dims passed as separate arguments (x.view(2, 3)) or as one sequence (x.view((2, 3)))."""
    if len(args) == 1 and isinstance(args[0], (list, tuple, torch.Size)):
        return tuple(args[0])
    return tuple(args)


@handles("view", "reshape")
def _view(r: Reader, x, *args, **kwargs):
    sizes = call_sizes(args or tuple(kwargs.get("shape", kwargs.get("size", ()))))
    if len(sizes) == 1 and isinstance(sizes[0], torch.dtype):
        raise Unsupported("Tensor.view(dtype)")
    return r.op("reshape", [r.tensor(x)], sizes=sizes)


@handles("view_as", "reshape_as")
def _view_as(r: Reader, x, other):
    return r.op("reshape", [r.tensor(x)], sizes=r.sizes_of(r.tensor(other)))


@handles("expand")
def _expand(r: Reader, x, *args, **kwargs):
    return r.op("expand", [r.tensor(x)], sizes=call_sizes(args or tuple(kwargs.get("size", ()))))


@handles("expand_as")
def _expand_as(r: Reader, x, other):
    return r.op("expand", [r.tensor(x)], sizes=r.sizes_of(r.tensor(other)))


@handles("flatten")
def _flatten(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, start_dim=0, end_dim=-1")
    x = r.tensor(a["input"])
    if x.rank == 0:
        return r.op("reshape", [x], sizes=(1,))
    return r.op("flatten", [x], start=norm_dim(a["start_dim"], x.rank), end=norm_dim(a["end_dim"], x.rank))


@handles("unflatten")
def _unflatten(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, dim, sizes")
    x = r.tensor(a["input"])
    dim = norm_dim(a["dim"], x.rank)
    sizes = r.sizes_of(x)
    return r.op("reshape", [x], sizes=sizes[:dim] + tuple(a["sizes"]) + sizes[dim + 1:])


@handles("unsqueeze")
def _unsqueeze(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, dim")
    return r.op("unsqueeze", [r.tensor(a["input"])], dim=int(a["dim"]))


@handles("squeeze")
def _squeeze(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, dim=None")
    x = r.tensor(a["input"])
    return r.op("squeeze", [x], dims=None if a["dim"] is None else ints_of(a["dim"]))


@handles("permute")
def _permute(r: Reader, x, *dims, **kwargs):
    return r.op("permute", [r.tensor(x)], dims=call_sizes(dims or tuple(kwargs.get("dims", ()))))


@handles("transpose", "swapaxes", "swapdims")
def _transpose(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, dim0, dim1")
    return r.op("transpose", [r.tensor(a["input"])], dim0=int(a["dim0"]), dim1=int(a["dim1"]))


@handles("t")
def _t(r: Reader, x):
    x = r.tensor(x)
    return x if x.rank < 2 else r.op("transpose", [x], dim0=0, dim1=1)


@handles("movedim", "moveaxis")
def _movedim(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, source, destination")
    x = r.tensor(a["input"])
    src = [norm_dim(d, x.rank) for d in ints_of(a["source"])]
    dst = [norm_dim(d, x.rank) for d in ints_of(a["destination"])]
    order = [d for d in range(x.rank) if d not in src]
    for s, d in sorted(zip(dst, src)):
        order.insert(s, d)
    return r.op("permute", [x], dims=tuple(order))


@handles("unfold")
def _unfold(r: Reader, *args, **kwargs):
    """Tensor.unfold(dim, size, step): windows that neither overlap nor leave gaps (step == size) are the dim cut
    into (windows, size) with the window's own elements moved last (a tail shorter than a window is dropped, as
    unfold does), views kernels merge well; other steps are torch's own unfold view (overlapping strides), which
    kernels read through its strides."""
    a = bind(args, kwargs, "input, dimension, size, step")
    x = r.tensor(a["input"])
    dim = norm_dim(int(a["dimension"]), x.rank)
    size, step = int(scalar_of(a["size"])), int(scalar_of(a["step"]))
    if step != size:
        return r.op("unfold", [x], dim=dim, size=size, step=step)
    sizes = r.sizes_of(x)
    windows = r.sym_binary("floordiv", sizes[dim], size)
    # the tail, where other sizes leave one: a view, which splitting the dim keeps a view
    x = r.op("slice", [x], dim=dim, start=0, stop=r.sym_binary("mul", windows, size), step=1)
    x = r.op("reshape", [x], sizes=sizes[:dim] + (windows, size) + sizes[dim + 1:])
    order = [d for d in range(x.rank) if d != dim + 1] + [dim + 1]
    return r.op("permute", [x], dims=tuple(order))


@handles("narrow")
def _narrow(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, dim, start, length")
    return r.op("slice", [r.tensor(a["input"])], dim=int(a["dim"]), start=a["start"],
                stop=r.sym_binary("add", a["start"], a["length"]), step=1)


@handles("select")
def _select(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, dim, index")
    x = r.tensor(a["input"])
    dim = norm_dim(int(a["dim"]), x.rank)
    index = int(scalar_of(a["index"]))
    return r.op("select", [x], dim=dim, index=index)


@handles("unbind")
def _unbind(r: Reader, *args, **kwargs):
    """A tuple of views, one per index along dim (its length is the traced shape's)."""
    a = bind(args, kwargs, "input, dim=0")
    x = r.tensor(a["input"])
    dim = norm_dim(int(a["dim"]), x.rank)
    return tuple(r.op("select", [x], dim=dim, index=i) for i in range(scalar_of(r.size_of(x, dim))))


@handles("size")
def _size(r: Reader, x, dim=None):
    x = r.tensor(x)
    return r.sizes_of(x) if dim is None else r.size_of(x, int(dim))


@handles("dim", "ndimension")
def _dim(r: Reader, x):
    return r.tensor(x).rank


@handles("numel")
def _numel(r: Reader, x):
    x = r.tensor(x)
    return r.b.sym("sym_numel", [x], math.prod(x.shape), r.origin)


@handles("getattr")
def _getattr(r: Reader, obj, name):
    if isinstance(obj, Value) and obj.is_tensor:
        if name == "shape":
            return r.sizes_of(obj)
        if name == "ndim":
            return obj.rank
        if name == "dtype":
            return obj.dtype
        if name in ("T", "mT"):
            return r.op("permute", [obj], dims=tuple(range(obj.rank))[::-1]) if name == "T" else \
                r.op("transpose", [obj], dim0=-2, dim1=-1)
        if name == "device":
            return "device"
        raise Unsupported(f"Tensor.{name}")
    if isinstance(obj, tuple) and name in ("values", "indices"):
        return obj[0 if name == "values" else 1]
    raise Unsupported(f"getattr {name}")


@handles("getitem")
def _getitem(r: Reader, obj, index):
    if not (isinstance(obj, Value) and obj.is_tensor):
        return obj[scalar_of(index)]
    return tensor_index(r, obj, index)


def tensor_index(r: Reader, x: Value, index: Any) -> Value:
    """Basic indexing (ints, slices, None, ...) as views; tensor indices are not supported."""
    items = list(index) if isinstance(index, tuple) else [index]
    if any(isinstance(i, Value) and i.is_tensor for i in items) or any(isinstance(i, list) for i in items):
        raise Unsupported("advanced indexing", "indexing with a tensor or list")
    explicit = sum(1 for i in items if i is not None and i is not Ellipsis)
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (x.rank - explicit)
    items += [slice(None)] * (x.rank - explicit - sum(1 for i in items if i is Ellipsis))
    dim = 0
    for item in items:
        if item is None:
            x = r.op("unsqueeze", [x], dim=dim)
            dim += 1
        elif isinstance(item, slice):
            start, stop, step = item.start, item.stop, scalar_of(item.step)
            if start in (None, 0) and stop is None and step in (None, 1):
                dim += 1
                continue
            x = r.op("slice", [x], dim=dim, start=start, stop=stop, step=step)
            dim += 1
        else:
            x = r.op("select", [x], dim=dim, index=int(scalar_of(item)))
    return x


# -- splits ----------------------------------------------------------------------------------------------
def _pieces(r: Reader, x: Value, dim: int, bounds: list) -> tuple:
    """Slices of x along dim between consecutive bounds (host numbers or ints; None: the dim's end)."""
    out = []
    for start, stop in zip(bounds, bounds[1:]):
        if (start in (None, 0)) and stop is None:
            out.append(x)
        else:
            out.append(r.op("slice", [x], dim=dim, start=start, stop=stop, step=1))
    return tuple(out)


def split_by_size(r: Reader, x: Value, dim: int, size) -> tuple:
    """Pieces `size` wide (the last one what is left); their count is the traced shape's."""
    step = int(scalar_of(size)) if not isinstance(size, Value) else size.concrete
    if step <= 0:
        raise Unsupported(r.origin or "torch.split", f"a split size of {step}")
    count = max(1, -(-x.shape[dim] // step))
    bounds = [r.sym_binary("mul", size, k) if k else 0 for k in range(count)] + [None]
    return _pieces(r, x, dim, bounds)


def split_by_sizes(r: Reader, x: Value, dim: int, sizes) -> tuple:
    bounds, at = [0], 0
    for s in sizes:
        at = r.sym_binary("add", at, s)
        bounds.append(at)
    if sum(int(traced(s)) for s in sizes) != x.shape[dim]:
        raise Unsupported(r.origin or "torch.split", f"sizes {list(map(traced, sizes))} for a dim of {x.shape[dim]}")
    bounds[-1] = None
    return _pieces(r, x, dim, bounds)


@handles("split", "split_with_sizes", "unsafe_split", "unsafe_split_with_sizes", "split_copy")
def _split(r: Reader, x, *args, **kwargs):
    size = kwargs.pop("split_size_or_sections", kwargs.pop("split_size", kwargs.pop("split_sizes", None)))
    a = bind(args if size is None else (size, *args), kwargs, "size, dim=0")
    x = r.tensor(x)
    dim = norm_dim(int(scalar_of(a["dim"])), x.rank)
    if isinstance(a["size"], (list, tuple, torch.Size)):
        return split_by_sizes(r, x, dim, list(a["size"]))
    return split_by_size(r, x, dim, a["size"])


@handles("chunk", "unsafe_chunk")
def _chunk(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, chunks, dim=0")
    x = r.tensor(a["input"])
    dim = norm_dim(int(scalar_of(a["dim"])), x.rank)
    chunks = int(scalar_of(a["chunks"]))
    if chunks <= 0:
        raise Unsupported(r.origin or "torch.chunk", f"{chunks} chunks")
    n = r.size_of(x, dim)  # pieces of ceil(n / chunks), computed when forward runs
    size = r.sym_binary("floordiv", r.sym_binary("add", n, chunks - 1), chunks)
    return split_by_size(r, x, dim, size) if x.shape[dim] else (x,)


@handles("tensor_split")
def _tensor_split(r: Reader, *args, **kwargs):
    """Into N pieces (the first n % N one longer), or at the given indices, as slices."""
    sections = kwargs.pop("sections", kwargs.pop("indices", kwargs.pop("tensor_indices_or_sections", None)))
    a = bind(args if sections is None else (args[0], sections, *args[1:]), kwargs, "input, sections, dim=0")
    x = r.tensor(a["input"])
    dim = norm_dim(int(scalar_of(a["dim"])), x.rank)
    cut = a["sections"]
    if isinstance(cut, Value) and cut.is_tensor:
        raise Unsupported(r.origin or "torch.tensor_split", "indices given as a tensor")
    if isinstance(cut, (list, tuple)):
        return _pieces(r, x, dim, [0, *cut, None])
    count = int(scalar_of(cut))
    if count <= 0:
        raise Unsupported(r.origin or "torch.tensor_split", f"{count} sections")
    n = int(scalar_of(r.size_of(x, dim)))  # the pieces' bounds are built for this size (checked when it runs)
    base, extra = divmod(n, count)
    bounds = [k * base + min(k, extra) for k in range(count)] + [None]
    return _pieces(r, x, dim, bounds)
