"""Handlers of torch-level functions and tensor methods that compute: pointwise ops, reductions, products,
convolution and pooling, normalization (torch.*, F.*, Tensor.* and operator.*, by name)."""

from __future__ import annotations

import math
from typing import Any

import torch

from kfoundry.experts.composer.ir.builder import norm_dim, norm_dims
from kfoundry.experts.composer.ir.graph import SYM, Value, number
from kfoundry.experts.composer.read import decompose, norm
from kfoundry.experts.composer.read.handling import (
    HandlerTable,
    Reader,
    Unsupported,
    bind,
    ints_of,
    operand,
    scalar_of,
    tuple_n,
)

HANDLERS = HandlerTable()  # this module's handlers: lower_fx merges them into the reader's
handles = HANDLERS.handles


# -- pointwise ----------------------------------------------------------------------------------------
@handles("add", "sub", "subtract")
def _add_sub(r: Reader, *args, **kwargs):
    alpha = kwargs.pop("alpha", 1)
    kwargs.pop("out", None)
    a = bind(args, kwargs, "input, other")
    name = "add" if r.key == "add" else "sub"
    x, y = a["input"], a["other"]
    if alpha != 1:
        if not isinstance(y, Value):
            y = y * alpha
        else:
            y = r.op("mul", [y, alpha])
    return r.binary(name, (x, y), {})


@handles("rsub")
def _rsub(r: Reader, *args, **kwargs):
    alpha = kwargs.pop("alpha", 1)
    a = bind(args, kwargs, "input, other")
    x = a["input"] if alpha == 1 else r.op("mul", [a["input"], alpha])
    return r.binary("sub", (a["other"], x), {})


@handles("neg")
def _neg(r: Reader, *args, **kwargs):
    x = bind(args, kwargs, "input")["input"]
    if isinstance(x, Value) and x.kind == SYM:
        return r.b.sym("sym_neg", [x], -x.concrete, r.origin)
    return r.unary("neg", (x,), {})


@handles("gelu")
def _gelu(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, approximate='none'")
    return r.op("gelu", [r.tensor(a["input"])], approximate=a["approximate"])


@handles("leaky_relu")
def _leaky_relu(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, negative_slope=0.01, inplace=False")
    return r.op("leaky_relu", [r.tensor(a["input"])], slope=float(a["negative_slope"]))


@handles("elu", "celu")
def _elu(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, alpha=1.0, inplace=False, scale=1.0, input_scale=1.0")
    alpha = float(a["alpha"])
    input_scale = 1.0 / alpha if r.key == "celu" else float(a["input_scale"])
    return r.op("elu", [r.tensor(a["input"])], alpha=alpha, scale=float(a["scale"]), input_scale=input_scale)


@handles("softplus")
def _softplus(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, beta=1.0, threshold=20.0")
    return r.op("softplus", [r.tensor(a["input"])], beta=float(a["beta"]), threshold=float(a["threshold"]))


@handles("hardtanh")
def _hardtanh(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, min_val=-1.0, max_val=1.0, inplace=False")
    return r.op("clamp", [r.tensor(a["input"])], min=float(a["min_val"]), max=float(a["max_val"]))


@handles("threshold")
def _threshold(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, threshold, value, inplace=False")
    return r.op("threshold", [r.tensor(a["input"])], threshold=float(a["threshold"]), value=float(a["value"]))


@handles("clamp", "clip", "clamp_min", "clamp_max")
def _clamp(r: Reader, *args, **kwargs):
    key = r.key
    if key == "clamp_min":
        a = bind(args, kwargs, "input, min")
        a["max"] = None
    elif key == "clamp_max":
        a = bind(args, kwargs, "input, max")
        a["min"] = None
    else:
        a = bind(args, kwargs, "input, min=None, max=None")
    x = r.tensor(a["input"])
    lo, hi = a["min"], a["max"]
    if isinstance(lo, Value) or isinstance(hi, Value):
        if isinstance(lo, Value) or lo is not None:
            x = r.op("maximum", [x, lo]) if isinstance(lo, Value) else r.op("clamp", [x], min=float(lo), max=None)
        if isinstance(hi, Value) or hi is not None:
            x = r.op("minimum", [x, hi]) if isinstance(hi, Value) else r.op("clamp", [x], min=None, max=float(hi))
        return x
    return r.op("clamp", [x], min=None if lo is None else float(lo), max=None if hi is None else float(hi))


@handles("cumsum", "cumprod")
def _scan(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, dim, dtype=None")
    x = r.tensor(a["input"])
    if x.rank == 0:
        raise Unsupported(r.origin or f"torch.{r.key}", "a scan of a 0-d tensor")
    if a["dtype"] is not None:
        x = r.op("cast", [x], dtype=a["dtype"])
    return r.op(r.key, [x], dim=norm_dim(int(a["dim"]), x.rank))


@handles("triu", "tril")
def _triangle(r: Reader, *args, **kwargs):
    """triu / tril over the last two dims: x where (column - row) >= diagonal (triu) or <= diagonal (tril),
    else 0; the row and column of each element are index ops (iota), so the mask costs no memory."""
    a = bind(args, kwargs, "input, diagonal=0")
    x = r.tensor(a["input"])
    if x.rank < 2:
        raise Unsupported(r.origin or f"torch.{r.key}", "a triangle of fewer than two dims")
    offset = r.op("sub", [r.op("iota", [x], dim=x.rank - 1), r.op("iota", [x], dim=x.rank - 2)])
    keep = r.op("ge" if r.key == "triu" else "le", [offset, int(a["diagonal"])])
    return r.op("where", [keep, x, 0])


@handles("where")
def _where(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "condition, input, other")
    return r.op("where", [r.tensor(a["condition"]), a["input"], a["other"]])


@handles("masked_fill")
def _masked_fill(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, mask, value")
    x, mask, value = r.tensor(a["input"]), r.tensor(a["mask"], "mask"), a["value"]
    if isinstance(value, Value) and value.is_tensor and value.rank:
        raise Unsupported(r.origin or "Tensor.masked_fill", "a fill value of more than one number")
    if isinstance(value, Value) and value.is_tensor:  # a 0-d tensor: its number, in x's dtype
        value = r.op("cast", [value], dtype=x.dtype, follows=not x.fixed_dtype)
    elif not isinstance(value, Value):
        value = float(value) if x.is_float else value
    filled = r.op("where", [mask, value, x])
    return filled if filled.dtype == x.dtype else r.op("cast", [filled], dtype=x.dtype, follows=not x.fixed_dtype)


@handles("addcmul", "addcdiv")
def _addcmul(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, tensor1, tensor2, value=1")
    div = r.key == "addcdiv"
    return decompose.addcmul(r.b, a["input"], a["tensor1"], a["tensor2"], a["value"], r.origin, div=div)


@handles("lerp")
def _lerp(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, end, weight")
    diff = r.op("sub", [a["end"], a["input"]])
    return r.op("add", [a["input"], r.op("mul", [diff, a["weight"]])])


@handles("tensor", "as_tensor", "scalar_tensor")
def _tensor_constant(r: Reader, data, *rest, **kwargs):
    """torch.tensor(0.0, device=x.device) in forward: a number, which every op takes as it takes a scalar."""
    if isinstance(data, float) or isinstance(data, int) and torch.is_floating_point(torch.tensor(data, **{
            k: v for k, v in kwargs.items() if k == "dtype"})):
        return float(data)
    raise Unsupported(r.origin or "torch.tensor", "a tensor created inside forward from data that is not one number")


@handles("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
def _dropout(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, p=0.5, training=True, inplace=False")
    return dropout_value(r, a["input"], float(a["p"]), bool(a["training"]))


def dropout_value(r: Reader, x: Any, p: float, training: bool) -> Value:
    if training and p > 0:
        raise Unsupported("dropout (training mode)", "random masks cannot be reproduced; evaluate with eval_mode")
    return r.tensor(x)


@handles("to", "type")
def _to(r: Reader, *args, **kwargs):
    x = r.tensor(args[0])
    dtype = kwargs.get("dtype")
    for arg in args[1:]:
        if isinstance(arg, torch.dtype):
            dtype = arg
        elif isinstance(arg, Value) and arg.is_tensor:
            if arg.dtype == x.dtype and arg.fixed_dtype == x.fixed_dtype:
                return x
            dtype = arg.dtype
    if dtype is None or (dtype == x.dtype and not x.fixed_dtype):
        return x
    return r.op("cast", [x], dtype=dtype)


@handles("type_as")
def _type_as(r: Reader, x, other):
    return _to(r, x, other)


CAST_METHODS = {"float": torch.float32, "half": torch.float16, "double": torch.float64, "bfloat16": torch.bfloat16,
                "int": torch.int32, "long": torch.int64, "bool": torch.bool, "short": torch.int16,
                "char": torch.int8, "byte": torch.uint8}
for _name, _dtype in CAST_METHODS.items():
    def _cast(r: Reader, x, *rest, _dtype=_dtype, **kwargs):
        if not isinstance(x, Value):
            raise Unsupported("cast", "of a constant")
        if x.dtype == _dtype and not x.fixed_dtype:
            return x
        return r.op("cast", [r.tensor(x)], dtype=_dtype)
    HANDLERS[_name] = _cast


@handles("cpu", "cuda")
def _device_move(r: Reader, x, *rest, **kwargs):
    return r.tensor(x)


# -- reductions ---------------------------------------------------------------------------------------
@handles("sum", "mean", "amax", "amin", "nansum")
def _reduce(r: Reader, *args, **kwargs):
    key = r.key
    a = bind(args, kwargs, "input, dim=None, keepdim=False, dtype=None")
    x = r.tensor(a["input"])
    if a["dtype"] is not None:
        x = r.op("cast", [x], dtype=a["dtype"])
    name = {"nansum": "sum"}.get(key, key)
    dims = norm_dims(a["dim"], x.rank)
    return r.op(name, [x], dims=dims, keepdim=bool(a["keepdim"]))


@handles("max", "min")
def _max_min(r: Reader, *args, **kwargs):
    key = r.key
    x = r.tensor(args[0])
    rest = list(args[1:])
    other = kwargs.pop("other", None)
    if rest and (isinstance(rest[0], Value) and rest[0].is_tensor or isinstance(rest[0], float)):
        other = rest.pop(0)  # a float is never a dim: a one-number tensor built in forward, read as its number
    if other is not None:
        return r.binary("maximum" if key == "max" else "minimum", (x, other), {})
    a = bind((x, *rest), kwargs, "input, dim=None, keepdim=False")
    if a["dim"] is None:
        return r.op("amax" if key == "max" else "amin", [x], dims=None, keepdim=False)
    dim = norm_dim(int(a["dim"]), x.rank)
    values = r.op("amax" if key == "max" else "amin", [x], dims=(dim,), keepdim=bool(a["keepdim"]))
    index = r.op("argmax" if key == "max" else "argmin", [x], dim=dim, keepdim=bool(a["keepdim"]))
    return (values, index)


@handles("argmax", "argmin")
def _arg_reduce(r: Reader, *args, **kwargs):
    key = r.key
    a = bind(args, kwargs, "input, dim=None, keepdim=False")
    x = r.tensor(a["input"])
    if a["dim"] is None:
        flat = r.op("reshape", [x], sizes=(-1,))
        return r.op(key, [flat], dim=0, keepdim=False)
    return r.op(key, [x], dim=norm_dim(int(a["dim"]), x.rank), keepdim=bool(a["keepdim"]))


@handles("logsumexp")
def _logsumexp(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, dim, keepdim=False")
    return decompose.logsumexp(r.b, r.tensor(a["input"]), a["dim"], bool(a["keepdim"]), r.origin)


@handles("var", "std")
def _var(r: Reader, *args, **kwargs):
    key = r.key
    correction = kwargs.pop("correction", None)
    unbiased = kwargs.pop("unbiased", None)
    rest = list(args[1:])
    if rest and isinstance(rest[0], bool):
        unbiased = rest.pop(0)
    a = bind((args[0], *rest), kwargs, "input, dim=None, keepdim=False")
    if correction is None:
        correction = 0 if unbiased is False else 1
    v = decompose.variance(r.b, r.tensor(a["input"]), a["dim"], float(correction), bool(a["keepdim"]), r.origin)
    return r.op("sqrt", [v]) if key == "std" else v


@handles("norm")
def _norm(r: Reader, *args, **kwargs):
    """torch.norm, Tensor.norm and torch.linalg.norm (`ord`) as vector norms; matrix norms are not read."""
    if "ord" in kwargs:
        kwargs["p"] = kwargs.pop("ord")
    a = bind(args, kwargs, "input, p='fro', dim=None, keepdim=False, out=None, dtype=None")
    x, p, dims = r.tensor(a["input"]), a["p"], a["dim"]
    matrix = len(ints_of(dims)) == 2 if dims is not None else x.rank == 2
    if isinstance(p, str) and p != "fro" or r.origin.startswith("torch.linalg") and matrix and p not in (None, "fro"):
        raise Unsupported(r.origin or "torch.norm", f"the matrix norm p={p!r}")
    if p is None or p == "fro":
        p = 2.0
    return _vector_norm_of(r, x, p, dims, bool(a["keepdim"]), a["dtype"])


@handles("vector_norm", "linalg_vector_norm")
def _vector_norm(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, ord=2, dim=None, keepdim=False, dtype=None, out=None")
    return _vector_norm_of(r, r.tensor(a["input"]), a["ord"], a["dim"], bool(a["keepdim"]), a["dtype"])


def _vector_norm_of(r: Reader, x: Value, p, dims, keepdim: bool, dtype) -> Value:
    p = float(scalar_of(p))
    if p < 0 and p != -math.inf:
        raise Unsupported(r.origin or "torch.linalg.vector_norm", f"ord={p}")
    if dtype is not None:
        x = r.op("cast", [x], dtype=dtype)
    if not x.is_float:
        raise Unsupported(r.origin or "torch.linalg.vector_norm", "the norm of an integer tensor")
    return decompose.vector_norm(r.b, x, ints_of(dims) if dims is not None else None, keepdim, r.origin, ord=p)


@handles("normalize")
def _normalize(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, p=2.0, dim=1, eps=1e-12, out=None")
    if float(a["p"]) != 2.0:
        raise Unsupported("F.normalize", f"p={a['p']}")
    return decompose.normalize(r.b, r.tensor(a["input"]), int(a["dim"]), float(a["eps"]), r.origin)


@handles("softmax", "log_softmax", "softmin")
def _softmax(r: Reader, *args, **kwargs):
    key = r.key
    a = bind(args, kwargs, "input, dim=None, _stacklevel=3, dtype=None")
    x = r.tensor(a["input"])
    if a["dtype"] is not None:
        x = r.op("cast", [x], dtype=a["dtype"])
    if a["dim"] is None:
        a["dim"] = 0 if x.rank in (0, 1, 3) else 1  # PyTorch's legacy implicit choice
    if key == "softmin":
        x = r.op("neg", [x])
    return decompose.softmax(r.b, x, int(a["dim"]), r.origin, log=key == "log_softmax")


@handles("mse_loss", "l1_loss")
def _loss(r: Reader, *args, **kwargs):
    key = r.key
    a = bind(args, kwargs, "input, target, size_average=None, reduce=None, reduction='mean', weight=None")
    d = r.op("sub", [a["input"], a["target"]])
    per = r.op("mul", [d, d]) if key == "mse_loss" else r.op("abs", [d])
    return decompose.reduce_loss(r.b, per, a["reduction"], r.origin)


@handles("cross_entropy", "nll_loss")
def _cross_entropy(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, "
                           "reduction='mean', label_smoothing=0.0")
    if a["weight"] is not None or float(a["label_smoothing"]) != 0.0 or a["size_average"] is not None \
            or a["reduce"] is not None:
        raise Unsupported(f"F.{r.key}", "class weights, label smoothing or legacy reduction arguments")
    return loss_by_class(r, r.key, a["input"], a["target"], int(a["ignore_index"]), a["reduction"])


def loss_by_class(r: Reader, key: str, x, target, ignore_index: int, reduction: str) -> Value:
    x, target = r.tensor(x), r.tensor(target, "target")
    if key == "cross_entropy":
        return decompose.cross_entropy(r.b, x, target, ignore_index, reduction, r.origin)
    return decompose.nll_loss(r.b, x, target, ignore_index, reduction, r.origin)


@handles("smooth_l1_loss", "huber_loss")
def _smooth_l1(r: Reader, *args, **kwargs):
    kwargs.pop("size_average", None)
    kwargs.pop("reduce", None)
    a = bind(args, kwargs, "input, target, reduction='mean', beta=1.0, delta=1.0, weight=None")
    d = r.op("abs", [r.op("sub", [a["input"], a["target"]])])
    if r.key == "huber_loss":
        delta = float(a["delta"])
        quadratic, linear = r.op("mul", [r.op("mul", [d, d]), 0.5]), r.op("mul", [r.op("sub", [d, 0.5 * delta]), delta])
        per = r.op("where", [r.op("lt", [d, delta]), quadratic, linear])
    else:
        beta = float(a["beta"])
        if beta == 0:
            per = d
        else:
            quadratic = r.op("mul", [r.op("mul", [d, d]), 0.5 / beta])
            per = r.op("where", [r.op("lt", [d, beta]), quadratic, r.op("sub", [d, 0.5 * beta])])
    return decompose.reduce_loss(r.b, per, a["reduction"], r.origin)


@handles("kl_div")
def _kl_div(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, target, size_average=None, reduce=None, reduction='mean', log_target=False")
    x, t = r.tensor(a["input"]), r.tensor(a["target"], "target")
    if a["log_target"]:
        per = r.op("mul", [r.op("exp", [t]), r.op("sub", [t, x])])
    else:  # target * (log(target) - input), with 0 where the target is 0 (like xlogy)
        plogp = r.op("where", [r.op("gt", [t, 0.0]), r.op("mul", [t, r.op("log", [t])]), 0.0])
        per = r.op("sub", [plogp, r.op("mul", [t, x])])
    if a["reduction"] == "batchmean":
        total = decompose.reduce_loss(r.b, per, "sum", r.origin)
        return r.op("div", [total, r.size_of(x, 0)]) if x.rank else total
    return decompose.reduce_loss(r.b, per, a["reduction"], r.origin)


@handles("scaled_dot_product_attention")
def _sdpa(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, "
                           "enable_gqa=False")
    return attention(r, a["query"], a["key"], a["value"], a["attn_mask"], float(a["dropout_p"]),
                     bool(a["is_causal"]), a["scale"], bool(a["enable_gqa"]))


def attention(r: Reader, q, k, v, mask=None, dropout_p: float = 0.0, is_causal: bool = False, scale=None,
              enable_gqa: bool = False) -> Value:
    """softmax(q @ k^T * scale + mask) @ v; a causal mask keeps each query's keys up to its own position (the
    top-left-aligned lower triangle, as PyTorch's)."""
    q, k, v = r.tensor(q), r.tensor(k, "key"), r.tensor(v, "value")
    if enable_gqa or dropout_p != 0.0:
        raise Unsupported("F.scaled_dot_product_attention", "grouped-query or dropout attention")
    if scale is None:  # 1 / sqrt(head dim), computed when forward runs
        scale = r.sym_binary("div", 1.0, r.sym_binary("pow", r.size_of(q, -1), 0.5))
    scores = decompose.matmul(r.b, q, r.op("transpose", [k], dim0=-2, dim1=-1), r.origin)
    scores = r.op("mul", [scores, scale])
    if is_causal:
        offset = r.op("sub", [r.op("iota", [scores], dim=scores.rank - 1), r.op("iota", [scores], dim=scores.rank - 2)])
        scores = r.op("where", [r.op("le", [offset, 0]), scores, -math.inf])
    if isinstance(mask, Value) and mask.is_tensor:
        if mask.dtype == torch.bool:
            scores = r.op("where", [mask, scores, -math.inf])
        else:
            scores = r.op("add", [scores, mask])
    weights = decompose.softmax(r.b, scores, -1, r.origin)
    return decompose.matmul(r.b, weights, v, r.origin)


# -- matrix products ------------------------------------------------------------------------------------
@handles("matmul", "mm", "bmm")
def _matmul(r: Reader, *args, **kwargs):
    kwargs.pop("out", None)
    a = bind(args, kwargs, "input, other")
    return decompose.matmul(r.b, r.tensor(a["input"]), r.tensor(a["other"], "other"), r.origin)


@handles("linear")
def _linear(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, weight, bias=None")
    return decompose.linear(r.b, r.tensor(a["input"]), r.tensor(a["weight"], "weight"), a["bias"], r.origin)


@handles("addmm", "baddbmm")
def _addmm(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, mat1, mat2, beta=1, alpha=1")
    prod = decompose.matmul(r.b, r.tensor(a["mat1"]), r.tensor(a["mat2"]), r.origin)
    if a["alpha"] != 1:
        prod = r.op("mul", [prod, a["alpha"]])
    bias = a["input"]
    if a["beta"] == 0:
        return prod
    if a["beta"] != 1:
        bias = r.op("mul", [bias, a["beta"]])
    return r.op("add", [prod, bias])


# -- convolution and pooling ----------------------------------------------------------------------------
def conv(r: Reader, x: Value, w: Value, bias: Value | None, stride, padding, dilation, groups: int | Value,
         transposed: bool = False, output_padding: Any = 0) -> Value:
    """A convolution op. The kernels unroll the weight's kernel sizes (checked when the candidate runs); a group
    count the module holds is read when forward runs, unless it is 1 (a plain convolution's kernels, checked)."""
    nd = x.rank - 2
    if nd not in (1, 2, 3):
        raise Unsupported(r.origin, f"a convolution over {nd} dims")
    for d in range(nd):
        r.size_of(w, 2 + d).assumed = True
    groups = scalar_of(groups) if not isinstance(groups, Value) or groups.concrete == 1 else groups
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same" and all(s == 1 for s in tuple_n(stride, nd)):
            dil = tuple_n(dilation, nd)
            total = [dil[i] * (w.shape[2 + i] - 1) for i in range(nd)]
            if any(t % 2 for t in total):
                raise Unsupported(r.origin, "padding='same' with an asymmetric padding")
            padding = tuple(t // 2 for t in total)
        else:
            raise Unsupported(r.origin, f"padding={padding!r}")
    y = r.op("conv", [x, w], stride=tuple_n(stride, nd), padding=tuple_n(padding, nd),
             dilation=tuple_n(dilation, nd), groups=groups, transposed=bool(transposed),
             output_padding=tuple_n(output_padding, nd))
    if bias is not None:
        shaped = r.op("reshape", [bias], sizes=(-1,) + (1,) * nd)
        y = r.op("add", [y, shaped])
    return y


@handles("conv1d", "conv2d", "conv3d")
def _conv(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1")
    return conv(r, r.tensor(a["input"]), r.tensor(a["weight"]), a["bias"], a["stride"], a["padding"],
                a["dilation"], a["groups"])


@handles("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
def _conv_t(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1")
    return conv(r, r.tensor(a["input"]), r.tensor(a["weight"]), a["bias"], a["stride"], a["padding"],
                a["dilation"], a["groups"], True, a["output_padding"])


def pool(r: Reader, kind: str, x: Value, nd: int, kernel, stride, padding, dilation=1, ceil_mode=False,
         count_include_pad=True, divisor_override=None) -> Value:
    if x.rank not in (nd + 1, nd + 2):
        raise Unsupported(r.origin, f"a {nd}-d pool of a rank-{x.rank} tensor")
    kernel = tuple_n(kernel, nd)
    stride = tuple_n(stride if stride not in (None, [], ()) else kernel, nd)
    attrs: dict[str, Any] = {"kernel": kernel, "stride": stride, "padding": tuple_n(padding, nd),
                             "ceil_mode": bool(ceil_mode)}
    if kind == "max_pool":
        attrs["dilation"] = tuple_n(dilation, nd)
    else:
        attrs.update(count_include_pad=bool(count_include_pad), divisor_override=divisor_override)
    return r.op(kind, [x], **attrs)


@handles("max_pool1d", "max_pool2d", "max_pool3d")
def _max_pool(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, "
                           "return_indices=False")
    if a["return_indices"]:
        raise Unsupported(r.origin, "return_indices=True")
    nd = int(r.key[-2])
    return pool(r, "max_pool", r.tensor(a["input"]), nd, a["kernel_size"], a["stride"], a["padding"],
                a["dilation"], a["ceil_mode"])


@handles("avg_pool1d", "avg_pool2d", "avg_pool3d")
def _avg_pool(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, "
                           "divisor_override=None")
    nd = int(r.key[-2])
    return pool(r, "avg_pool", r.tensor(a["input"]), nd, a["kernel_size"], a["stride"], a["padding"], 1,
                a["ceil_mode"], a["count_include_pad"], a["divisor_override"])


def adaptive_pool(r: Reader, kind: str, x: Value, nd: int, output_size) -> Value:
    """An adaptive pool; an output size of None keeps the input's size along that dim (read when forward runs)."""
    size = ints_of(output_size)
    if len(size) == 1:
        size = size * nd
    size = tuple(r.size_of(x, x.rank - nd + i) if s is None else int(scalar_of(s)) for i, s in enumerate(size))
    if all(number(s) == 1 for s in size):  # global pooling: a reduction over the spatial dims
        dims = tuple(range(x.rank - nd, x.rank))
        return r.op("mean" if kind == "avg" else "amax", [x], dims=dims, keepdim=True)
    return r.op(f"adaptive_{kind}_pool", [x], output_size=size)


@handles("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
         "adaptive_max_pool2d", "adaptive_max_pool3d")
def _adaptive(r: Reader, *args, **kwargs):
    key = r.key
    a = bind(args, kwargs, "input, output_size, return_indices=False")
    if a["return_indices"]:
        raise Unsupported(r.origin, "return_indices=True")
    return adaptive_pool(r, "max" if "max" in key else "avg", r.tensor(a["input"]), int(key[-2]), a["output_size"])


# -- normalization --------------------------------------------------------------------------------------
@handles("layer_norm")
def _layer_norm(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, normalized_shape, weight=None, bias=None, eps=1e-05")
    return norm.layer_norm(r.b, r.tensor(a["input"]), len(ints_of(a["normalized_shape"])), a["weight"], a["bias"],
                           operand(a["eps"]), r.origin)


@handles("rms_norm")
def _rms_norm(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, normalized_shape, weight=None, eps=None")
    x = r.tensor(a["input"])
    eps = torch.finfo(x.dtype).eps if a["eps"] is None else operand(a["eps"])
    return norm.rms_norm(r.b, x, len(ints_of(a["normalized_shape"])), a["weight"], eps, r.origin)


@handles("batch_norm")
def _batch_norm(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, running_mean, running_var, weight=None, bias=None, training=False, "
                           "momentum=0.1, eps=1e-05")
    return norm.batch_norm(r.b, r.tensor(a["input"]), a["running_mean"], a["running_var"], a["weight"], a["bias"],
                           bool(a["training"]), operand(a["eps"]), r.origin)


@handles("instance_norm")
def _instance_norm(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, running_mean=None, running_var=None, weight=None, bias=None, "
                           "use_input_stats=True, momentum=0.1, eps=1e-05")
    return norm.instance_norm(r.b, r.tensor(a["input"]), a["running_mean"], a["running_var"], a["weight"],
                              a["bias"], bool(a["use_input_stats"]), operand(a["eps"]), r.origin)


@handles("group_norm")
def _group_norm(r: Reader, *args, **kwargs):
    a = bind(args, kwargs, "input, num_groups, weight=None, bias=None, eps=1e-05")
    x = r.tensor(a["input"])
    return norm.group_norm(r.b, x, operand(a["num_groups"], int), a["weight"], a["bias"], operand(a["eps"]),
                           list(r.sizes_of(x)), r.origin)
