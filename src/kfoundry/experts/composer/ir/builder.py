"""Building an IR graph: values and ops with their shapes and dtypes inferred the way PyTorch infers them.

Decompositions (softmax, the norms, linear) create ops the trace never ran, so every op's shape and dtype
come from here; where the trace did run an op, the reader checks the two agree.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kfoundry.experts.composer.ir.graph import (
    COMPARISONS,
    CONST,
    INPUT,
    LAYOUTS,
    PARAM,
    POINTWISE,
    POOLS,
    REDUCTIONS,
    SCANS,
    SYM,
    TENSOR,
    Graph,
    Op,
    Value,
    flat_values,
    number,
)


class ShapeError(ValueError):
    """An op whose arguments do not fit together (or that the composer's inference does not know)."""


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(torch.broadcast_shapes(*[torch.Size(s) for s in shapes]))
    except RuntimeError as exc:
        raise ShapeError(str(exc)) from None


def aligned(arg_rank: int, out_rank: int) -> list[int]:
    """For each dim of an argument, the dim of a broadcast result it lines up with (right-aligned)."""
    return [i + out_rank - arg_rank for i in range(arg_rank)]


def norm_dim(dim: int, rank: int) -> int:
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise ShapeError(f"dim {dim} out of range for rank {rank}")
    return dim % max(rank, 1)


def norm_dims(dims: Any, rank: int) -> tuple[int, ...]:
    """Reduction dims as sorted non-negative ints; None or () means all."""
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = (dims,)
    return tuple(sorted({norm_dim(d, rank) for d in dims}))


def _probe(arg: Any):
    if isinstance(arg, Value) and not arg.is_tensor:
        return arg.concrete  # a host number promotes like the Python number it is
    if isinstance(arg, Value):
        return torch.empty((1,) if arg.rank else (), dtype=arg.dtype)
    return arg


def result_dtype(args: list[Any]) -> torch.dtype:
    present = [a for a in args if isinstance(a, (Value, bool, int, float))]
    if not present:
        return torch.get_default_dtype()
    result = torch.result_type(_probe(present[0]), _probe(present[0]))
    for arg in present[1:]:
        result = torch.promote_types(result, torch.result_type(_probe(present[0]), _probe(arg)))
    return result


def _follows_precision(args: list[Any], dtype: torch.dtype) -> bool:
    """A float result follows the evaluation's precision when a float tensor argument of that dtype does, and no
    float tensor argument has a dtype of its own (a tensor made in forward, a cast): that one takes part in the
    promotion whatever the precision (fp32 zeros times an fp16 input are fp32)."""
    tensors = [a for a in args if isinstance(a, Value) and a.is_tensor]
    return dtype.is_floating_point and any(a.dtype == dtype and not a.fixed_dtype for a in tensors) and \
        not any(a.is_float and a.fixed_dtype for a in tensors)


def _reshape(shape: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[int, ...]:
    total = math.prod(shape)
    sizes = list(sizes)
    if sizes.count(-1) > 1:
        raise ShapeError("reshape with more than one -1")
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = total // known if known else 0
    if math.prod(sizes) != total:
        raise ShapeError(f"cannot reshape {list(shape)} to {sizes}")
    return tuple(sizes)


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if len(a) < 2 or len(b) < 2:
        raise ShapeError("matmul operands must have rank >= 2 here")
    if a[-1] != b[-2]:
        raise ShapeError(f"matmul of {list(a)} and {list(b)}")
    return broadcast(a[:-2], b[:-2]) + (a[-2], b[-1])


def conv_out_size(size: int, kernel: int, stride: int, padding: int, dilation: int, transposed: bool,
                  output_padding: int = 0) -> int:
    if transposed:
        return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def pool_out_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1  # the last window must start inside the input or its left padding
    return out


def _conv_shape(x: Value, w: Value, attrs: dict) -> tuple[int, ...]:
    nd = len(attrs["stride"])
    if x.rank != nd + 2 or w.rank != nd + 2:
        raise ShapeError(f"conv of rank {x.rank} input with rank {w.rank} weight")
    groups = number(attrs["groups"])
    if attrs["transposed"]:
        out_channels = w.shape[1] * groups
    else:
        out_channels = w.shape[0]
    spatial = tuple(conv_out_size(x.shape[2 + i], w.shape[2 + i], attrs["stride"][i], attrs["padding"][i],
                                  attrs["dilation"][i], attrs["transposed"], attrs.get("output_padding", (0,) * nd)[i])
                    for i in range(nd))
    return (x.shape[0], out_channels) + spatial


def _pool_shape(name: str, x: Value, attrs: dict) -> tuple[int, ...]:
    if name.startswith("adaptive"):
        return x.shape[:x.rank - len(attrs["output_size"])] + tuple(number(s) for s in attrs["output_size"])
    nd = len(attrs["kernel"])
    dilation = attrs.get("dilation", (1,) * nd)
    spatial = tuple(pool_out_size(x.shape[x.rank - nd + i], attrs["kernel"][i], attrs["stride"][i],
                                  attrs["padding"][i], dilation[i], attrs["ceil_mode"]) for i in range(nd))
    return x.shape[:x.rank - nd] + spatial


def _slice_shape(shape: tuple[int, ...], attrs: dict) -> tuple[int, ...]:
    dim = norm_dim(attrs["dim"], len(shape))
    start, stop, step = slice(number(attrs["start"]), number(attrs["stop"]), attrs["step"]).indices(shape[dim])
    return shape[:dim] + (len(range(start, stop, step)),) + shape[dim + 1:]


def concrete_sizes(sizes: Any) -> tuple[int, ...]:
    out = []
    for s in sizes:
        if isinstance(s, Value):
            if s.kind != SYM:
                raise ShapeError("a size that is not an integer")
            out.append(int(s.concrete))
        else:
            out.append(int(s))
    return tuple(out)


def infer(name: str, args: list[Any], attrs: dict[str, Any]) -> tuple[tuple[int, ...], torch.dtype, bool]:
    """(shape, dtype, fixed_dtype) of the result of op `name`."""
    tensors = [a for a in args if isinstance(a, Value) and a.is_tensor]
    if name == "full":
        return concrete_sizes(attrs["sizes"]), attrs["dtype"], attrs["fixed_dtype"]
    if name in LAYOUTS:
        return _layout_shape(name, tensors, attrs), *_layout_dtype(tensors)
    if name == "recurrent":
        x = args[0]
        return (2 if attrs["kind"] == "LSTM" else 1,) + x.shape[:-1] + (attrs["hidden"],), x.dtype, x.fixed_dtype
    if name in POINTWISE:
        shape = broadcast(*[t.shape for t in tensors]) if tensors else ()
        if name in COMPARISONS:
            return shape, torch.bool, True
        if name == "cast":  # a decomposition's cast to its operand's float type follows the precision with it
            return shape, attrs["dtype"], not attrs.get("follows", False)
        if name == "iota":
            return shape, torch.int64, True
        operands = args[1:] if name == "where" else args
        dtype = result_dtype(operands)
        if name == "div" and not dtype.is_floating_point and attrs.get("rounding_mode") is None:
            dtype = torch.get_default_dtype()
        if name in ("sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "erf", "gelu", "silu", "sin", "cos") \
                and not dtype.is_floating_point:
            dtype = torch.get_default_dtype()
        return shape, dtype, not _follows_precision(operands, dtype)
    x = args[0] if args else None
    if name in REDUCTIONS:
        if name in ("argmax", "argmin"):
            dims = norm_dims(attrs["dim"], x.rank)
        else:
            dims = norm_dims(attrs["dims"], x.rank)
        if attrs.get("keepdim"):
            shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape))
        else:
            shape = tuple(s for i, s in enumerate(x.shape) if i not in dims)
        if name in ("argmax", "argmin"):
            return shape, torch.int64, True
        if name == "sum" and not x.is_float:
            return shape, torch.int64, True
        return shape, x.dtype, x.fixed_dtype
    if name in SCANS:  # as torch: integer and boolean inputs accumulate in int64
        return x.shape, (x.dtype if x.is_float else torch.int64), (x.fixed_dtype if x.is_float else True)
    if name == "matmul":
        a, b = args
        dtype = torch.promote_types(a.dtype, b.dtype)
        return _matmul_shape(a.shape, b.shape), dtype, not _follows_precision([a, b], dtype)
    if name == "conv":
        return _conv_shape(args[0], args[1], attrs), x.dtype, x.fixed_dtype
    if name in POOLS:
        return _pool_shape(name, x, attrs), x.dtype, x.fixed_dtype
    if name == "reshape":
        return _reshape(x.shape, concrete_sizes(attrs["sizes"])), x.dtype, x.fixed_dtype
    if name == "expand":
        sizes = concrete_sizes(attrs["sizes"])
        lead = len(sizes) - x.rank
        shape = tuple(s if s != -1 else x.shape[i - lead] for i, s in enumerate(sizes))
        if broadcast(x.shape, shape) != shape:
            raise ShapeError(f"cannot expand {list(x.shape)} to {list(sizes)}")
        return shape, x.dtype, x.fixed_dtype
    if name == "permute":
        dims = [norm_dim(d, x.rank) for d in attrs["dims"]]
        if sorted(dims) != list(range(x.rank)):
            raise ShapeError(f"bad permutation {dims}")
        return tuple(x.shape[d] for d in dims), x.dtype, x.fixed_dtype
    if name == "transpose":
        d0, d1 = norm_dim(attrs["dim0"], x.rank), norm_dim(attrs["dim1"], x.rank)
        shape = list(x.shape)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        return tuple(shape), x.dtype, x.fixed_dtype
    if name == "unsqueeze":
        d = norm_dim(attrs["dim"], x.rank + 1)
        return x.shape[:d] + (1,) + x.shape[d:], x.dtype, x.fixed_dtype
    if name == "squeeze":
        dims = norm_dims(attrs["dims"], x.rank)
        return tuple(s for i, s in enumerate(x.shape) if not (i in dims and s == 1)), x.dtype, x.fixed_dtype
    if name == "flatten":
        if x.rank == 0:
            return (1,), x.dtype, x.fixed_dtype
        start, end = norm_dim(attrs["start"], x.rank), norm_dim(attrs["end"], x.rank)
        shape = x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:]
        return shape, x.dtype, x.fixed_dtype
    if name == "slice":
        return _slice_shape(x.shape, attrs), x.dtype, x.fixed_dtype
    if name == "select":
        dim = norm_dim(attrs["dim"], x.rank)
        return x.shape[:dim] + x.shape[dim + 1:], x.dtype, x.fixed_dtype
    if name == "unfold":
        dim, size, step = attrs["dim"], attrs["size"], attrs["step"]
        if size > x.shape[dim] or step < 1:
            raise ShapeError(f"windows of {size} every {step} along a dim of {x.shape[dim]}")
        windows = (x.shape[dim] - size) // step + 1
        return x.shape[:dim] + (windows,) + x.shape[dim + 1:] + (size,), x.dtype, x.fixed_dtype
    raise ShapeError(f"no shape rule for {name}")


def _layout_shape(name: str, tensors: list[Value], attrs: dict[str, Any]) -> tuple[int, ...]:
    x = tensors[0]
    if name in ("flip", "roll"):
        return x.shape
    if name == "pad":
        shape = list(x.shape)
        for dim, before, after in attrs["moves"]:
            shape[dim] += before + after
            if shape[dim] < 0:
                raise ShapeError(f"padding {before}, {after} leaves dim {dim} of {list(x.shape)} negative")
        return tuple(shape)
    dim = attrs["dim"]
    for t in tensors[1:]:
        if t.rank != x.rank or any(t.shape[i] != x.shape[i] for i in range(x.rank) if i != dim):
            raise ShapeError(f"cat of {list(x.shape)} and {list(t.shape)} along dim {dim}")
    return x.shape[:dim] + (sum(t.shape[dim] for t in tensors),) + x.shape[dim + 1:]


def _layout_dtype(tensors: list[Value]) -> tuple[torch.dtype, bool]:
    dtype = result_dtype(tensors)
    return dtype, not _follows_precision(tensors, dtype)


def host_dtype(number: Any) -> torch.dtype | None:
    """The dtype a host number computes in (None for a tuple, which only a check reads)."""
    if isinstance(number, bool):
        return torch.bool
    if isinstance(number, int):
        return torch.int64
    return torch.float64 if isinstance(number, float) else None


class GraphBuilder:
    """Adds values and ops to a Graph with fresh names and inferred shapes."""

    def __init__(self) -> None:
        self.graph = Graph()
        self._taken: set[str] = set()

    def fresh(self, base: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in base).strip("_").lower() or "v"
        if base[0].isdigit():
            base = "v" + base
        name, n = base, 1
        while name in self._taken:
            n += 1
            name = f"{base}{n}"
        self._taken.add(name)
        return name

    def input(self, name: str, index: int, example: Any) -> Value:
        if isinstance(example, torch.Tensor):
            value = Value(self.fresh(name), INPUT, tuple(example.shape), example.dtype, index=index)
        else:
            value = Value(self.fresh(name), CONST, index=index, concrete=example)
        self.graph.inputs.append(value)
        return value

    def param(self, path: str, tensor: torch.Tensor) -> Value:
        if path not in self.graph.params:
            self.graph.params[path] = Value(self.fresh(path.replace(".", "_")), PARAM, tuple(tensor.shape),
                                            tensor.dtype, path=path)
        return self.graph.params[path]

    def sym(self, name: str, args: list[Any], concrete: Any, origin: str = "", hint: str | None = None,
            **attrs: Any) -> Value:
        out = Value(self.fresh(hint or name), SYM, dtype=host_dtype(concrete), fixed_dtype=True, concrete=concrete)
        op = Op(name, list(args), attrs, out, origin)
        out.producer = op
        self.graph.ops.append(op)
        return out

    def op(self, name: str, args: list[Any], origin: str = "", hint: str | None = None, **attrs: Any) -> Value:
        if name in REDUCTIONS and "dims" in attrs and args and isinstance(args[0], Value):
            attrs["dims"] = norm_dims(attrs["dims"], args[0].rank)
        shape, dtype, fixed = infer(name, list(args), attrs)
        out = Value(self.fresh(hint or name), TENSOR, shape, dtype, fixed)
        op = Op(name, list(args), attrs, out, origin)
        out.producer = op
        for value in flat_values(args):
            if value.kind not in (INPUT, PARAM, TENSOR, SYM, CONST):
                raise ShapeError(f"bad argument {value!r}")
        self.graph.ops.append(op)
        return out
