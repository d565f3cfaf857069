"""The normalization layers as primitives, computed the way the reference runs them: batch statistics in
training mode (and whenever there are no running statistics), running statistics in eval mode. Statistics
are two-pass (mean, then the mean of squared deviations, biased) like PyTorch's; the row-group template turns
each into one kernel."""

from __future__ import annotations

from kfoundry.experts.composer.ir.builder import GraphBuilder
from kfoundry.experts.composer.ir.graph import Value


def _channel_view(b: GraphBuilder, p: Value | None, rank: int, origin: str) -> Value | None:
    """A per-channel (C,) parameter viewed as (C, 1, ..., 1) so that it lines up with dim 1 of the input."""
    if p is None or rank <= 2:
        return p
    return b.op("reshape", [p], origin, hint=f"{p.name}_c", sizes=(-1,) + (1,) * (rank - 2))


def _affine(b: GraphBuilder, y: Value, weight: Value | None, bias: Value | None, origin: str) -> Value:
    if weight is not None:
        y = b.op("mul", [y, weight], origin)
    if bias is not None:
        y = b.op("add", [y, bias], origin)
    return y


def standardize(b: GraphBuilder, x: Value, dims: tuple[int, ...], eps: float | Value, origin: str) -> Value:
    """(x - mean) / sqrt(var + eps) over dims, with the biased variance."""
    mean = b.op("mean", [x], origin, hint="mean", dims=dims, keepdim=True)
    d = b.op("sub", [x, mean], origin, hint="centered")
    var = b.op("mean", [b.op("mul", [d, d], origin)], origin, hint="var", dims=dims, keepdim=True)
    rstd = b.op("rsqrt", [b.op("add", [var, eps], origin)], origin, hint="rstd")
    return b.op("mul", [d, rstd], origin, hint="normed")


def layer_norm(b: GraphBuilder, x: Value, normalized_ndim: int, weight: Value | None, bias: Value | None,
               eps: float | Value, origin: str = "") -> Value:
    dims = tuple(range(x.rank - normalized_ndim, x.rank))
    return _affine(b, standardize(b, x, dims, eps, origin), weight, bias, origin)


def rms_norm(b: GraphBuilder, x: Value, normalized_ndim: int, weight: Value | None, eps: float | Value,
             origin: str = "") -> Value:
    dims = tuple(range(x.rank - normalized_ndim, x.rank))
    ms = b.op("mean", [b.op("mul", [x, x], origin)], origin, hint="mean_sq", dims=dims, keepdim=True)
    rstd = b.op("rsqrt", [b.op("add", [ms, eps], origin)], origin, hint="rstd")
    return _affine(b, b.op("mul", [x, rstd], origin, hint="normed"), weight, None, origin)


def batch_norm(b: GraphBuilder, x: Value, running_mean: Value | None, running_var: Value | None,
               weight: Value | None, bias: Value | None, use_batch_stats: bool, eps: float | Value,
               origin: str = "") -> Value:
    """BatchNorm over dim 1: batch statistics over every other dim, or the running statistics."""
    if use_batch_stats or running_mean is None or running_var is None:
        dims = tuple(d for d in range(x.rank) if d != 1)
        y = standardize(b, x, dims, eps, origin)
    else:
        mean = _channel_view(b, running_mean, x.rank, origin)
        var = _channel_view(b, running_var, x.rank, origin)
        rstd = b.op("rsqrt", [b.op("add", [var, eps], origin)], origin, hint="rstd")
        y = b.op("mul", [b.op("sub", [x, mean], origin, hint="centered"), rstd], origin, hint="normed")
    return _affine(b, y, _channel_view(b, weight, x.rank, origin), _channel_view(b, bias, x.rank, origin), origin)


def instance_norm(b: GraphBuilder, x: Value, running_mean: Value | None, running_var: Value | None,
                  weight: Value | None, bias: Value | None, use_input_stats: bool, eps: float | Value,
                  origin: str = "") -> Value:
    """InstanceNorm: statistics per (sample, channel) over the spatial dims, or the running statistics."""
    if use_input_stats or running_mean is None or running_var is None:
        y = standardize(b, x, tuple(range(2, x.rank)), eps, origin)
        return _affine(b, y, _channel_view(b, weight, x.rank, origin), _channel_view(b, bias, x.rank, origin),
                       origin)
    return batch_norm(b, x, running_mean, running_var, weight, bias, False, eps, origin)


def group_norm(b: GraphBuilder, x: Value, groups: int | Value, weight: Value | None, bias: Value | None,
               eps: float | Value, sizes: list, origin: str = "") -> Value:
    """GroupNorm: x viewed as (N, G, C/G, rest); statistics over the last two; the per-channel affine is
    applied in that view too (weight viewed as (G, C/G, 1)), so the whole layer is one kernel.

    `sizes` are x's sizes as the host knows them (ints or sym values), used to view the result back; the group
    count is a host number too where the module holds it, so that C/G is computed when forward runs."""
    count = groups.concrete if isinstance(groups, Value) else groups
    if x.shape[1] % count:
        raise ValueError(f"GroupNorm: {x.shape[1]} channels in {count} groups")
    channels = sizes[1]
    if isinstance(channels, Value) or isinstance(groups, Value):
        per_group = b.sym("sym_floordiv", [channels, groups], x.shape[1] // count, origin, hint="channels_per_group")
    else:
        per_group = channels // groups
    grouped = b.op("reshape", [x], origin, hint="grouped", sizes=(sizes[0], groups, per_group, -1))
    y = standardize(b, grouped, (2, 3), eps, origin)
    w = b.op("reshape", [weight], origin, hint=f"{weight.name}_grouped", sizes=(groups, per_group, 1)) \
        if weight is not None else None
    bb = b.op("reshape", [bias], origin, hint=f"{bias.name}_grouped", sizes=(groups, per_group, 1)) \
        if bias is not None else None
    y = _affine(b, y, w, bb, origin)
    return b.op("reshape", [y], origin, hint="group_normed", sizes=tuple(sizes))
