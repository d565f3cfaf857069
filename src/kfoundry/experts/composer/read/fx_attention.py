"""Handlers of torch.nn's attention modules (nn.MultiheadAttention, nn.TransformerEncoderLayer,
nn.TransformerEncoder), which torch.fx keeps whole: each is written as the math of PyTorch's slow path (the
projections as GEMMs, the heads as views, a softmax over the scores). In eval mode PyTorch may take its fused
fast path instead, which computes the same function. Dropout with p > 0 in training mode is refused (random)."""

from __future__ import annotations

import math
from typing import Any

import torch

from kfoundry.experts.composer.ir.graph import Value
from kfoundry.experts.composer.read import decompose
from kfoundry.experts.composer.read.handling import HandlerTable, Reader, Unsupported, bind

HANDLERS = HandlerTable()  # this module's handlers: lower_fx merges them into the reader's
handles = HANDLERS.handles


def _no_dropout(r: Reader, what: str, p: float, training: bool) -> None:
    if training and p > 0:
        raise Unsupported("dropout (training mode)", f"{what}: random masks cannot be reproduced; evaluate with "
                          "eval_mode or build it with dropout=0.0")


def _submodule(r: Reader, path: str, name: str, x: Value) -> Value:
    """A child module of `path` read by its own handler."""
    child = f"{path}.{name}" if path else name
    module = r.module(child)
    handler = r.handler(f"nn.{type(module).__name__}")
    if handler is None:
        raise Unsupported(f"nn.{type(module).__name__}", f"inside {r.origin}")
    return handler(r, module, child, x)


# -- multi-head attention ---------------------------------------------------------------------------------
def _packed_part(r: Reader, packed: Value | None, k: int, width: Value) -> Value | None:
    """The k-th third (q, k or v) of a packed in-projection weight or bias."""
    if packed is None:
        return None
    start = r.sym_binary("mul", width, k) if k else 0
    return r.op("slice", [packed], dim=0, start=start, stop=r.sym_binary("mul", width, k + 1), step=1)


def _projections(r: Reader, m, path: str, query: Value, key: Value, value: Value) -> list[Value]:
    """q, k and v (batch first): one GEMM with a packed weight where the three inputs are one tensor."""
    bias = r.state(path, "in_proj_bias")
    if m._qkv_same_embed_dim:
        weight = r.state(path, "in_proj_weight")
        width = r.size_of(weight, 1)
        if query is key is value:
            packed = decompose.linear(r.b, query, weight, bias, r.origin)
            return [_packed_part_last(r, packed, k, width) for k in range(3)]
        weights = [_packed_part(r, weight, k, width) for k in range(3)]
    else:
        weights = [r.state(path, f"{name}_proj_weight") for name in "qkv"]
        width = r.size_of(weights[0], 0)
    biases = [_packed_part(r, bias, k, width) for k in range(3)]
    return [decompose.linear(r.b, x, w, b, r.origin) for x, w, b in zip((query, key, value), weights, biases)]


def _packed_part_last(r: Reader, x: Value, k: int, width: Value) -> Value:
    start = r.sym_binary("mul", width, k) if k else 0
    return r.op("slice", [x], dim=x.rank - 1, start=start, stop=r.sym_binary("mul", width, k + 1), step=1)


def _heads(r: Reader, x: Value, heads: int) -> Value:
    """(B, L, E) -> (B, heads, L, E / heads)."""
    batch, length, _ = r.sizes_of(x)
    return r.op("transpose", [r.op("reshape", [x], sizes=(batch, length, heads, -1))], dim0=1, dim1=2)


def _masked(r: Reader, scores: Value, mask: Value | None, heads: int, padding: bool = False) -> Value:
    """Scores with an attention mask (L, S) or (B * heads, L, S), or a key padding mask (B, S), applied: a boolean
    one hides where it is True, a float one is added."""
    if mask is None:
        return scores
    mask = r.tensor(mask, "a mask")
    if padding:
        batch, keys = r.sizes_of(mask)
        mask = r.op("reshape", [mask], sizes=(batch, 1, 1, keys))
    elif mask.rank == 3:
        _, length, keys = r.sizes_of(mask)
        mask = r.op("reshape", [mask], sizes=(-1, heads, length, keys))
    if mask.dtype == torch.bool:
        return r.op("where", [mask, -math.inf, scores])
    return r.op("add", [scores, mask])


def attention(r: Reader, m, path: str, query: Value, key: Value, value: Value, attn_mask: Value | None = None,
              key_padding_mask: Value | None = None, need_weights: bool = True, average: bool = True
              ) -> tuple[Value, Value | None]:
    """nn.MultiheadAttention's (output, weights averaged over heads or per head, or None)."""
    what = r.origin or "nn.MultiheadAttention"
    if m.bias_k is not None or m.add_zero_attn:
        raise Unsupported(what, "add_bias_kv or add_zero_attn")
    _no_dropout(r, what, float(m.dropout), m.training)
    if not m.batch_first:  # (L, B, E) in and out: the batch-first math between two views
        query, key, value = _batch_first(r, query, key, value)
    heads = r.config(path, "num_heads")
    q, k, v = (_heads(r, t, heads) for t in _projections(r, m, path, query, key, value))
    scale = r.sym_binary("div", 1.0, r.sym_binary("pow", r.size_of(q, -1), 0.5))
    scores = r.op("mul", [decompose.matmul(r.b, q, r.op("transpose", [k], dim0=-2, dim1=-1), r.origin), scale])
    scores = _masked(r, _masked(r, scores, attn_mask, heads), key_padding_mask, heads, padding=True)
    weights = decompose.softmax(r.b, scores, -1, r.origin)
    out = r.op("transpose", [decompose.matmul(r.b, weights, v, r.origin)], dim0=1, dim1=2)
    batch, length, _ = r.sizes_of(query)
    out = r.op("reshape", [out], sizes=(batch, length, -1))
    out = decompose.linear(r.b, out, r.state(f"{path}.out_proj", "weight"), r.state(f"{path}.out_proj", "bias"),
                           r.origin)
    if not m.batch_first:
        out = r.op("transpose", [out], dim0=0, dim1=1)
    if not need_weights:
        return out, None
    return out, r.op("mean", [weights], dims=(1,), keepdim=False) if average else weights


def _batch_first(r: Reader, query: Value, key: Value, value: Value) -> tuple[Value, Value, Value]:
    """(L, B, E) inputs as batch-first views; one input given three times stays one value (one packed GEMM)."""
    q = r.op("transpose", [query], dim0=0, dim1=1)
    k = q if key is query else r.op("transpose", [key], dim0=0, dim1=1)
    v = q if value is query else k if value is key else r.op("transpose", [value], dim0=0, dim1=1)
    return q, k, v


@handles("nn.MultiheadAttention")
def _m_multihead_attention(r: Reader, m, path, *args, **kwargs):
    a = bind(args, kwargs, "query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None, "
                           "average_attn_weights=True, is_causal=False")
    query, key, value = (r.tensor(a[n], n) for n in ("query", "key", "value"))
    if query.rank != 3:
        raise Unsupported(r.origin or "nn.MultiheadAttention", "an unbatched input")
    return attention(r, m, path, query, key, value, a["attn_mask"], a["key_padding_mask"], bool(a["need_weights"]),
                     bool(a["average_attn_weights"]))


# -- transformer encoder ------------------------------------------------------------------------------------
def _activation(r: Reader, m, path: str, x: Value) -> Value:
    act = m.activation
    if isinstance(act, torch.nn.Module):
        return _submodule(r, path, "activation", x)
    if act is torch.nn.functional.relu:
        return r.op("relu", [x])
    if act is torch.nn.functional.gelu:
        return r.op("gelu", [x], approximate="none")
    raise Unsupported(r.origin or "nn.TransformerEncoderLayer", f"the activation {getattr(act, '__name__', act)!r}")


def encoder_layer(r: Reader, m, path: str, x: Value, mask: Value | None = None,
                  padding: Value | None = None) -> Value:
    what = r.origin or "nn.TransformerEncoderLayer"
    for name in ("dropout", "dropout1", "dropout2"):
        _no_dropout(r, what, float(getattr(m, name).p), getattr(m, name).training)

    def self_attention(y: Value) -> Value:
        return attention(r, m.self_attn, f"{path}.self_attn", y, y, y, mask, padding, need_weights=False)[0]

    def feed_forward(y: Value) -> Value:
        hidden = _activation(r, m, path, _submodule(r, path, "linear1", y))
        return _submodule(r, path, "linear2", hidden)

    if m.norm_first:
        x = r.op("add", [x, self_attention(_submodule(r, path, "norm1", x))])
        return r.op("add", [x, feed_forward(_submodule(r, path, "norm2", x))])
    x = _submodule(r, path, "norm1", r.op("add", [x, self_attention(x)]))
    return _submodule(r, path, "norm2", r.op("add", [x, feed_forward(x)]))


@handles("nn.TransformerEncoderLayer")
def _m_encoder_layer(r: Reader, m, path, *args, **kwargs):
    a = bind(args, kwargs, "src, src_mask=None, src_key_padding_mask=None, is_causal=False")
    return encoder_layer(r, m, path, _batched(r, a["src"]), a["src_mask"], a["src_key_padding_mask"])


@handles("nn.TransformerEncoder")
def _m_encoder(r: Reader, m, path, *args, **kwargs):
    a = bind(args, kwargs, "src, mask=None, src_key_padding_mask=None, is_causal=None")
    if a["src_key_padding_mask"] is not None and not m.training:
        # eval mode may run the layers on nested tensors, which leave zeros at the padded positions
        raise Unsupported(r.origin or "nn.TransformerEncoder", "a key padding mask in eval mode")
    x = _batched(r, a["src"])
    for i, layer in enumerate(m.layers):
        x = encoder_layer(r, layer, f"{path}.layers.{i}", x, a["mask"], a["src_key_padding_mask"])
    return _submodule(r, path, "norm", x) if m.norm is not None else x


def _batched(r: Reader, x: Any) -> Value:
    x = r.tensor(x)
    if x.rank != 3:
        raise Unsupported(r.origin or "nn.TransformerEncoderLayer", "an unbatched input")
    return x


__all__ = ["attention", "encoder_layer"]
