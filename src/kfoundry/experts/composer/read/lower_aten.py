"""Reading a dispatch-level (ATen) trace into the composer's IR: the fallback for forwards torch.fx cannot
trace (control flow on shapes, untraceable calls). Most ATen ops share the torch-level handlers of
`lower_fx` (same names, same argument order); the ones that differ are handled here. Updates of running
statistics and other in-place writes to module state are not part of the output and are skipped.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx

from kfoundry.experts.composer.ir.builder import norm_dim
from kfoundry.experts.composer.ir.graph import Graph, Value, flat_values
from kfoundry.experts.composer.read import decompose, fx_layout, norm
from kfoundry.experts.composer.read.fx_functions import adaptive_pool, conv, loss_by_class, pool
from kfoundry.experts.composer.read.fx_functions import attention as fx_attention
from kfoundry.experts.composer.read.handling import HandlerTable, Unsupported, bind, scalar_of, tuple_n
from kfoundry.experts.composer.read.lower_fx import HANDLERS, POISON, FxReader, describe
from kfoundry.experts.composer.read.trace import Trace

# ATen names read by a torch-level handler of another name
ALIASES = {
    "_unsafe_view": "view", "alias": "clone", "lift_fresh_copy": "clone", "lift_fresh": "clone",
    "detach_": "detach", "true_divide": "div", "_adaptive_avg_pool1d": "adaptive_avg_pool1d",
    "_adaptive_avg_pool2d": "adaptive_avg_pool2d", "_adaptive_avg_pool3d": "adaptive_avg_pool3d",
    "sym_size": "size", "squeeze_copy": "squeeze", "view_copy": "view", "permute_copy": "permute",
    "expand_copy": "expand", "unsqueeze_copy": "unsqueeze", "t_copy": "t", "transpose_copy": "transpose",
    "clamp_min": "clamp_min", "clamp_max": "clamp_max", "sym_numel": "numel",
}
ATEN_HANDLERS = HandlerTable()  # by ATEN name: the ops read differently from their torch-level namesake
aten = ATEN_HANDLERS.handles


class AtenReader(FxReader):
    def dispatch(self, node: torch.fx.Node, args: tuple, kwargs: dict) -> Any:
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            return super().dispatch(node, args, kwargs)  # operator.* on sizes, getitem on tuples
        name = target._overloadpacket.__name__
        if name.endswith("_") and not name.endswith("__"):
            name = name[:-1]
        kwargs = {k: v for k, v in kwargs.items() if k not in ("memory_format", "layout", "device", "pin_memory",
                                                               "non_blocking")}
        self.key = name
        if name in ATEN_HANDLERS:
            return ATEN_HANDLERS[name](self, *args, **kwargs)
        key = ALIASES.get(name, name)
        self.key = key
        return self.call(key, args, kwargs, describe(node))


@aten("_to_copy", "to")
def _to_copy(r: AtenReader, x, *args, dtype=None, **kwargs):
    return HANDLERS["to"](r, x, dtype=dtype) if dtype is not None else r.tensor(x)


@aten("_softmax", "_log_softmax")
def _softmax(r: AtenReader, x, dim, half_to_float=False):
    return decompose.softmax(r.b, r.tensor(x), int(dim), r.origin, log=r.key == "_log_softmax")


@aten("_safe_softmax")
def _safe_softmax(r: AtenReader, x, dim, dtype=None):
    """softmax, with 0 (not NaN) along rows that are all -inf (attention with every key masked)."""
    x = r.tensor(x)
    if dtype is not None:
        x = r.op("cast", [x], dtype=dtype)
    dim = norm_dim(int(dim), x.rank)
    hidden = r.op("eq", [r.op("amax", [x], dims=(dim,), keepdim=True), -math.inf])
    return r.op("where", [hidden, 0.0, decompose.softmax(r.b, x, dim, r.origin)])


@aten("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math")
def _sdpa_parts(r: AtenReader, q, k, v, *rest, attn_mask=None, scale=None, **kwargs):
    """The attention output, and a second result (log-sum-exp or weights) that the composer does not compute."""
    if r.key == "_scaled_dot_product_attention_math":
        a = bind(rest, kwargs, "attn_mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, "
                               "enable_gqa=False")
        attn_mask = a["attn_mask"] if attn_mask is None else attn_mask
        if a["dropout_mask"] is not None:
            raise Unsupported("aten._scaled_dot_product_attention_math", "a dropout mask")
    else:
        a = bind(rest, kwargs, "dropout_p=0.0, is_causal=False")
        a["enable_gqa"] = False
    out = fx_attention(r, q, k, v, attn_mask, float(a["dropout_p"]), bool(a["is_causal"]), scale,
                       bool(a["enable_gqa"]))
    return (out, POISON)


@aten("slice")
def _slice(r: AtenReader, x, dim=0, start=None, end=None, step=1):
    x = r.tensor(x)
    if not isinstance(end, Value) and end is not None and end >= 2**62:
        end = None
    if start in (None, 0) and end is None and step == 1:
        return x
    return r.op("slice", [x], dim=norm_dim(int(dim), x.rank), start=start, stop=end, step=int(scalar_of(step)))


@aten("native_layer_norm")
def _native_layer_norm(r: AtenReader, x, normalized_shape, weight, bias, eps):
    y = norm.layer_norm(r.b, r.tensor(x), len(normalized_shape), weight, bias, float(eps), r.origin)
    return (y, POISON, POISON)


@aten("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional")
def _native_batch_norm(r: AtenReader, x, weight, bias, *rest):
    if len(rest) == 5:
        running_mean, running_var, training, _momentum, eps = rest
    elif len(rest) == 3:  # the overload without running statistics
        running_mean = running_var = None
        training, _momentum, eps = rest
    else:
        raise Unsupported(r.origin, "an unknown batch_norm overload")
    y = norm.batch_norm(r.b, r.tensor(x), running_mean, running_var, weight, bias, bool(training), float(eps),
                        r.origin)
    return (y, POISON, POISON) + ((POISON, POISON) if r.key.endswith("functional") else ())


@aten("_native_batch_norm_legit_no_training")
def _native_batch_norm_eval(r: AtenReader, x, weight, bias, running_mean, running_var, momentum, eps):
    y = norm.batch_norm(r.b, r.tensor(x), running_mean, running_var, weight, bias, False, float(eps), r.origin)
    return (y, POISON, POISON)


@aten("native_group_norm")
def _native_group_norm(r: AtenReader, x, weight, bias, n, c, hw, groups, eps):
    x = r.tensor(x)
    y = norm.group_norm(r.b, x, int(groups), weight, bias, float(eps), list(r.sizes_of(x)), r.origin)
    return (y, POISON, POISON)


@aten("convolution")
def _convolution(r: AtenReader, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return conv(r, r.tensor(x), r.tensor(weight), bias, stride, padding, dilation, groups, bool(transposed),
                output_padding)


@aten("max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices")
def _max_pool_with_indices(r: AtenReader, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    nd = int(r.key[len("max_pool")])
    return (pool(r, "max_pool", r.tensor(x), nd, kernel_size, stride, padding, dilation, ceil_mode), POISON)


@aten("max_pool1d", "max_pool2d", "max_pool3d")
def _max_pool(r: AtenReader, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return pool(r, "max_pool", r.tensor(x), int(r.key[-2]), kernel_size, stride, padding, dilation, ceil_mode)


@aten("avg_pool1d", "avg_pool2d", "avg_pool3d")
def _avg_pool(r: AtenReader, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    return pool(r, "avg_pool", r.tensor(x), int(r.key[-2]), kernel_size, stride, padding, 1, ceil_mode,
                count_include_pad, divisor_override)


@aten("adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d")
def _adaptive_max(r: AtenReader, x, output_size):
    return (adaptive_pool(r, "max", r.tensor(x), int(r.key[-2]), output_size), POISON)


@aten("native_dropout")
def _native_dropout(r: AtenReader, x, p, train):
    if train and p > 0:
        raise Unsupported("dropout (training mode)", "random masks cannot be reproduced; evaluate with eval_mode")
    return (r.tensor(x), POISON)


@aten("dropout")
def _dropout(r: AtenReader, x, p, train):
    if train and p > 0:
        raise Unsupported("dropout (training mode)", "random masks cannot be reproduced; evaluate with eval_mode")
    return r.tensor(x)


@aten("nll_loss_forward", "nll_loss2d_forward")
def _nll_loss_forward(r: AtenReader, x, target, weight, reduction, ignore_index):
    if weight is not None:
        raise Unsupported("aten.nll_loss_forward", "class weights")
    names = {0: "none", 1: "mean", 2: "sum"}
    return (loss_by_class(r, "nll_loss", x, target, int(ignore_index), names[int(reduction)]), POISON)


@aten("copy")
def _copy(r: AtenReader, dst, src, non_blocking=False):
    return r.tensor(src)


@aten("expand")
def _expand(r: AtenReader, x, size, implicit=False):
    return r.op("expand", [r.tensor(x)], sizes=tuple(size))


@aten("squeeze")
def _squeeze(r: AtenReader, x, dim=None):
    x = r.tensor(x)
    return r.op("squeeze", [x], dims=None if dim is None else tuple_n(dim, 1) if isinstance(dim, int) else
                tuple(dim))


@aten("arange", "empty", "empty_like", "empty_strided")
def _factory(r: AtenReader, *args, **kwargs):
    raise Unsupported(f"aten.{r.key}", "tensors created inside forward")


@aten("constant_pad_nd")
def _constant_pad(r: AtenReader, x, pad, value=0):
    return fx_layout.pad(r, r.tensor(x), tuple(pad), "constant", value)


@aten("reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d",
      "replication_pad3d", "_pad_circular")
def _mode_pad(r: AtenReader, x, padding):
    return fx_layout.pad(r, r.tensor(x), tuple(padding), fx_layout.pad_mode(r.key))


@aten("max", "min")
def _max_min(r: AtenReader, x, *rest, **kwargs):
    return HANDLERS["max"](r, x, *rest, **kwargs)


@aten("mean", "sum", "amax", "amin")
def _reduce(r: AtenReader, x, dim=None, keepdim=False, dtype=None):
    return HANDLERS["sum"](r, x, dim, keepdim, dtype=dtype)


@aten("var", "std")
def _var(r: AtenReader, x, dim=None, *rest, correction=None, keepdim=False):
    if rest:
        return HANDLERS["var"](r, x, dim, *rest, keepdim=keepdim)
    return HANDLERS["var"](r, x, dim, keepdim=keepdim, correction=1 if correction is None else correction)


@aten("view", "reshape")
def _view(r: AtenReader, x, size):
    return r.op("reshape", [r.tensor(x)], sizes=tuple(size))


def read_aten_graph(trace: Trace, eval_mode: bool = False) -> Graph:
    """The IR of a dispatch-level trace; raises ReadFailed naming the ops it lacks."""
    graph = AtenReader(trace, eval_mode).read()
    for value in flat_values([op.args for op in graph.ops]):
        if isinstance(value, Value) and value.kind == "param" and value.path not in graph.params:
            graph.params[value.path] = value
    return graph


__all__ = ["AtenReader", "bind", "read_aten_graph"]
