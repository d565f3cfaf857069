"""Composite PyTorch ops written as the composer's primitives: linear, matmul with vectors, the softmax
family, logsumexp, variance, and a few losses. Each computes what the reference computes, in the same order
of operations where that matters for accuracy (a max subtracted before exp, two-pass variance)."""

from __future__ import annotations

import math

from kfoundry.experts.composer.ir.builder import GraphBuilder, norm_dim, norm_dims
from kfoundry.experts.composer.ir.graph import Value


def linear(b: GraphBuilder, x: Value, weight: Value, bias: Value | None, origin: str = "") -> Value:
    """x @ weight.T + bias: the transposed weight is a view; the bias add joins the GEMM's epilogue."""
    wt = b.op("transpose", [weight], origin, hint=f"{weight.name}_t", dim0=0, dim1=1)
    y = matmul(b, x, wt, origin)
    return b.op("add", [y, bias], origin) if bias is not None else y


def matmul(b: GraphBuilder, x: Value, y: Value, origin: str = "") -> Value:
    """torch.matmul, with 1-D operands made 2-D by views and the added dimension removed afterwards."""
    if x.rank == 0 or y.rank == 0:
        raise ValueError("matmul of a 0-d tensor")
    xv = b.op("unsqueeze", [x], origin, dim=0) if x.rank == 1 else x
    yv = b.op("unsqueeze", [y], origin, dim=1) if y.rank == 1 else y
    out = b.op("matmul", [xv, yv], origin)
    if y.rank == 1:
        out = b.op("squeeze", [out], origin, dims=(-1,))
    if x.rank == 1:
        out = b.op("squeeze", [out], origin, dims=(-2 if y.rank > 1 else -1,))
    return out


def softmax(b: GraphBuilder, x: Value, dim: int, origin: str = "", log: bool = False) -> Value:
    dims = (norm_dim(dim, x.rank),)
    top = b.op("amax", [x], origin, hint="row_max", dims=dims, keepdim=True)
    shifted = b.op("sub", [x, top], origin, hint="shifted")
    if log:
        total = b.op("sum", [b.op("exp", [shifted], origin)], origin, hint="row_sum", dims=dims, keepdim=True)
        return b.op("sub", [shifted, b.op("log", [total], origin)], origin, hint="log_softmax")
    e = b.op("exp", [shifted], origin)
    total = b.op("sum", [e], origin, hint="row_sum", dims=dims, keepdim=True)
    return b.op("div", [e, total], origin, hint="softmax")


def logsumexp(b: GraphBuilder, x: Value, dims, keepdim: bool, origin: str = "") -> Value:
    dims = norm_dims(dims, x.rank)
    top = b.op("amax", [x], origin, hint="row_max", dims=dims, keepdim=True)
    e = b.op("exp", [b.op("sub", [x, top], origin)], origin)
    total = b.op("sum", [e], origin, hint="row_sum", dims=dims, keepdim=keepdim)
    top_out = top if keepdim else b.op("amax", [x], origin, hint="row_max", dims=dims, keepdim=False)
    return b.op("add", [b.op("log", [total], origin), top_out], origin, hint="logsumexp")


def variance(b: GraphBuilder, x: Value, dims, correction: float, keepdim: bool, origin: str = "") -> Value:
    dims = norm_dims(dims, x.rank)
    mean = b.op("mean", [x], origin, dims=dims, keepdim=True)
    d = b.op("sub", [x, mean], origin, hint="centered")
    return b.op("mean", [b.op("mul", [d, d], origin)], origin, hint="var", dims=dims, keepdim=keepdim,
                correction=correction)


def vector_norm(b: GraphBuilder, x: Value, dims, keepdim: bool, origin: str = "", ord: float = 2.0) -> Value:
    """The ord-norm over dims: 2 (sqrt of the sum of squares), 1, inf and -inf (the largest and smallest
    magnitude), 0 (the count of non-zeros), any other power p as (sum |x|^p)^(1/p)."""
    dims = norm_dims(dims, x.rank)
    if ord == 2:
        total = b.op("sum", [b.op("mul", [x, x], origin)], origin, dims=dims, keepdim=keepdim)
        return b.op("sqrt", [total], origin, hint="norm")
    magnitude = b.op("abs", [x], origin)
    if ord in (math.inf, -math.inf):
        return b.op("amax" if ord > 0 else "amin", [magnitude], origin, hint="norm", dims=dims, keepdim=keepdim)
    if ord == 1:
        return b.op("sum", [magnitude], origin, hint="norm", dims=dims, keepdim=keepdim)
    if ord == 0:
        nonzero = b.op("cast", [b.op("ne", [x, 0.0], origin)], origin, dtype=x.dtype, follows=not x.fixed_dtype)
        return b.op("sum", [nonzero], origin, hint="norm", dims=dims, keepdim=keepdim)
    total = b.op("sum", [b.op("pow", [magnitude, float(ord)], origin)], origin, dims=dims, keepdim=keepdim)
    return b.op("pow", [total, 1.0 / float(ord)], origin, hint="norm")


def normalize(b: GraphBuilder, x: Value, dim: int, eps: float, origin: str = "") -> Value:
    """F.normalize with p=2: x / max(||x||, eps)."""
    n = vector_norm(b, x, (dim,), True, origin)
    return b.op("div", [x, b.op("clamp", [n], origin, min=eps, max=None)], origin, hint="normalized")


def reduce_loss(b: GraphBuilder, per_element: Value, reduction: str, origin: str = "") -> Value:
    if reduction == "none":
        return per_element
    name = {"mean": "mean", "sum": "sum"}[reduction]
    return b.op(name, [per_element], origin, hint="loss", dims=None, keepdim=False)


def addcmul(b: GraphBuilder, x: Value, t1: Value, t2: Value, value: float, origin: str = "", div: bool = False):
    prod = b.op("div" if div else "mul", [t1, t2], origin)
    if value != 1:
        prod = b.op("mul", [prod, value], origin)
    return b.op("add", [x, prod], origin)


def count(shape: tuple[int, ...], dims: tuple[int, ...]) -> int:
    return math.prod(shape[d] for d in dims)


def nll_loss(b: GraphBuilder, log_probs: Value, target: Value, ignore_index: int, reduction: str,
             origin: str = "") -> Value:
    """-log_probs[i, target[i]] over the class dim 1, 0 where the target is ignore_index; 'mean' averages
    over the targets that are not ignored, like PyTorch."""
    if log_probs.rank == 1:
        raise ValueError("an unbatched nll_loss")
    wanted = b.op("unsqueeze", [target], origin, hint="target_c", dim=1)
    hit = b.op("eq", [b.op("iota", [log_probs], origin, dim=1), wanted], origin, hint="is_target")
    picked = b.op("sum", [b.op("where", [hit, log_probs, 0.0], origin)], origin, hint="picked", dims=(1,),
                  keepdim=False)
    valid = b.op("ne", [target, ignore_index], origin, hint="valid")
    per = b.op("where", [valid, b.op("neg", [picked], origin), 0.0], origin, hint="nll")
    if reduction == "none":
        return per
    total = b.op("sum", [per], origin, hint="loss_sum", dims=None, keepdim=False)
    if reduction == "sum":
        return total
    as_float = b.op("cast", [valid], origin, dtype=per.dtype, follows=not per.fixed_dtype)
    count = b.op("sum", [as_float], origin, hint="count", dims=None, keepdim=False)
    return b.op("div", [total, count], origin, hint="loss")


def cross_entropy(b: GraphBuilder, logits: Value, target: Value, ignore_index: int, reduction: str,
                  origin: str = "") -> Value:
    """Class indices: nll_loss of log_softmax over dim 1. Class probabilities (a float target):
    -sum(target * log_softmax) over dim 1."""
    log_probs = softmax(b, logits, 1, origin, log=True)
    if target.is_float:
        per = b.op("neg", [b.op("sum", [b.op("mul", [target, log_probs], origin)], origin, dims=(1,),
                                keepdim=False)], origin, hint="ce")
        return reduce_loss(b, per, reduction, origin)
    return nll_loss(b, log_probs, target, ignore_index, reduction, origin)
