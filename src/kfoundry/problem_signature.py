"""A problem's signature: the ATen ops its reference runs (in order), the shapes and dtypes it takes,
returns and holds, and a short `kind` label, for finding similar problems in the experience library.

The reference is trusted code, so it runs in-process, once, on the CPU (or on the meta device, which
propagates shapes without computing: useful for full-size problems)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# Ops that only move, view or allocate data: they say nothing about the computation.
LAYOUT_OPS = frozenset({
    "t", "view", "_unsafe_view", "reshape", "transpose", "permute", "expand", "contiguous", "clone",
    "detach", "alias", "squeeze", "unsqueeze", "as_strided", "slice", "select", "empty", "empty_like",
    "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "fill", "fill_", "copy", "copy_",
    "lift_fresh", "_to_copy", "to", "flatten", "unflatten", "split", "split_with_sizes", "chunk",
    "unbind", "cat", "stack", "new_empty", "new_zeros", "new_ones", "full", "full_like", "scalar_tensor",
    "_reshape_alias", "resize_", "index_select", "narrow", "repeat", "_local_scalar_dense", "item",
})

# Op name -> category. A problem's class is the first category of PRIMARY_ORDER among its ops.
CATEGORIES: dict[str, frozenset[str]] = {
    "conv": frozenset({"convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                       "conv_transpose2d", "conv_transpose3d", "mkldnn_convolution", "cudnn_convolution",
                       "convolution_overrideable", "_slow_conv2d_forward", "slow_conv3d_forward",
                       "slow_conv_transpose2d", "slow_conv_transpose3d", "_convolution_mode"}),
    # fused attention ops; a hand-written one (gemm, softmax, gemm) is found from the sequence: op_categories
    "attention": frozenset({"scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                            "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention_for_cpu",
                            "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
                            "_scaled_dot_product_fused_attention_overrideable", "_flash_attention_forward",
                            "_efficient_attention_forward", "_native_multi_head_attention"}),
    "recurrent": frozenset({"lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell",
                            "rnn_relu_cell", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "_cudnn_rnn",
                            "miopen_rnn", "mkldnn_rnn_layer"}),
    "gemm": frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addmv", "mv", "dot", "einsum",
                       "tensordot", "addbmm"}),
    "norm": frozenset({"native_layer_norm", "layer_norm", "native_batch_norm", "batch_norm",
                       "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                       "_native_batch_norm_legit_functional", "native_group_norm", "group_norm",
                       "instance_norm", "rms_norm", "_fused_rms_norm", "_batch_norm_impl_index"}),
    "softmax": frozenset({"_softmax", "softmax", "_log_softmax", "log_softmax", "_safe_softmax"}),
    "scan": frozenset({"cumsum", "cumsum_", "cumprod", "cumprod_", "cummax", "cummin", "_cummax_helper",
                       "_cummin_helper", "logcumsumexp", "_logcumsumexp"}),
    # adaptive_avg_pool to 1x1 is recorded as aten.mean: a global average pool is a reduction
    "pooling": frozenset({"avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d", "max_pool3d",
                          "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
                          "mkldnn_max_pool2d", "mkldnn_max_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
                          "adaptive_avg_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d",
                          "mkldnn_adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d",
                          "adaptive_max_pool3d", "fractional_max_pool2d", "fractional_max_pool3d", "lp_pool1d",
                          "lp_pool2d", "lp_pool3d"}),
    "reduction": frozenset({"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "var",
                            "std", "var_mean", "std_mean", "norm", "linalg_vector_norm", "logsumexp", "all",
                            "any", "mse_loss", "cross_entropy", "nll_loss_forward", "nll_loss",
                            "smooth_l1_loss", "huber_loss", "kl_div", "binary_cross_entropy"}),
}
# The class a kernel writer would name a problem by: the op that sets the kernel's structure and most of its
# cost comes first. A conv anywhere makes a conv problem (conv + pooling is a conv with a pooling epilogue).
# Attention comes before gemm, as it is made of gemms. A gemm beats the row-wise classes: with a scan, a norm
# or a softmax after it, the matmul still holds the FLOPs and sets the tiling, and the row op is its epilogue
# or a second pass over a smaller output. Scan and pooling come before norm, softmax and reduction: a scan's
# carry across blocks and a pooling window's stencil decide how the kernel walks the data, while a norm, a
# softmax or a reduction next to them is row statistics that fits inside that walk; plain reductions last.
# A recurrent layer (LSTM, GRU, RNN: a step of gemms and gates repeated over time) comes before gemm for the
# same reason attention does. kind_of's label names the second class present as well, so nothing is hidden
# by the order.
PRIMARY_ORDER = ("conv", "attention", "recurrent", "gemm", "scan", "pooling", "norm", "softmax", "reduction")
CLASSES = PRIMARY_ORDER + ("pointwise", "other")


def short_name(op: str) -> str:
    """"aten.addmm" -> "addmm"."""
    return op.rsplit(".", 1)[-1]


def op_category(op: str) -> str:
    """The category of one op: one of CATEGORIES, layout or pointwise (a hand-written attention's gemms
    and softmax are gemm and softmax here: op_categories sees the sequence)."""
    name = short_name(op)
    if name in LAYOUT_OPS:
        return "layout"
    for category, names in CATEGORIES.items():
        if name in names:
            return category
    return "pointwise"


def op_categories(ops: list[str]) -> list[str]:
    """The category of each op, where each hand-written attention is marked "attention": a gemm, later a
    softmax, later another gemm. The span from the last gemm before the softmax to the first after it, with
    the pointwise ops just before it (q and k scaled), becomes attention; its gemm, softmax and pointwise
    ops, that is (norms and reductions in it keep theirs). A gemm, softmax, gemm of linear layers (an MLP
    with a softmax) counts too: it has attention's structure, and attention's fused kernel fits it."""
    cats = [op_category(op) for op in ops]
    _mark_recurrence(ops, cats)
    start = 0
    while True:
        span = _attention_span(cats, start)
        if span is None:
            return cats
        first, last = span
        while first > start and cats[first - 1] in ("pointwise", "layout"):
            first -= 1
        for i in range(first, last + 1):
            if cats[i] in ("gemm", "softmax", "pointwise"):
                cats[i] = "attention"
        start = last + 1


GATES = frozenset({"sigmoid", "tanh"})
MAX_STEP_OPS = 48  # the longest step of a recurrence looked for (an LSTM step decomposed is about 15 ops)


def _mark_recurrence(ops: list[str], cats: list[str]) -> None:
    """Mark "recurrent" the gemm and pointwise ops of a recurrence written out step by step: a block of ops
    with two gemms or more (the input's and the hidden state's) and a sigmoid or tanh gate, repeated three
    times or more in a row. An MLP's repeated layer has one gemm per block, a transformer's gelu or softmax."""
    names = [short_name(op).removesuffix("_") for op in ops]
    # running counts of gemms and gates: a block's are a difference (problem_class runs on every retrieval)
    gemms, gates = [0], [0]
    for name, cat in zip(names, cats):
        gemms.append(gemms[-1] + (cat == "gemm"))
        gates.append(gates[-1] + (name in GATES))
    if gemms[-1] < 6 or not gates[-1]:  # three steps of two gemms, and a gate
        return
    n = len(names)
    i = 0
    while i < n:
        found = None
        for period in range(2, min(MAX_STEP_OPS, (n - i) // 3) + 1):
            if names[i + period] != names[i] or gemms[i + period] - gemms[i] < 2 or gates[i + period] == gates[i]:
                continue
            block = names[i:i + period]
            if names[i + period:i + 2 * period] == block and names[i + 2 * period:i + 3 * period] == block \
                    and not _repeats_inside(block):
                found = period
                break
        if found is None:
            i += 1
            continue
        end = i + found
        while names[end:end + found] == names[i:i + found]:
            end += found
        for k in range(i, end):
            if cats[k] in ("gemm", "pointwise"):
                cats[k] = "recurrent"
        i = end


def _repeats_inside(block: list[str]) -> bool:
    """The block is a shorter block repeated (two layers of an MLP, not one step)."""
    n = len(block)
    return any(n % q == 0 and block == block[:q] * (n // q) for q in range(1, n))


def _attention_span(cats: list[str], start: int) -> tuple[int, int] | None:
    """(the last gemm before a softmax, the first gemm after it), for the first such softmax from `start`."""
    last_gemm = None
    for i in range(start, len(cats)):
        if cats[i] == "gemm":
            last_gemm = i
        elif cats[i] == "softmax" and last_gemm is not None:
            after = next((j for j in range(i + 1, len(cats)) if cats[j] == "gemm"), None)
            return None if after is None else (last_gemm, after)
    return None


def compute_ops(ops: list[str]) -> list[str]:
    """The ops that compute (layout ops left out), in first-seen order, each once."""
    seen: dict[str, None] = {}
    for op in ops:
        if op_category(op) != "layout":
            seen.setdefault(op, None)
    return list(seen)


def kind_of(ops: list[str]) -> str:
    """A short label: the first class of PRIMARY_ORDER present, then the second ("gemm+reduction"), else
    '+pointwise' when pointwise ops are there too. A problem of pointwise ops alone is 'pointwise'; one with
    no computing op is 'other'."""
    categories = set(op_categories(ops)) - {"layout"}
    primaries = [c for c in PRIMARY_ORDER if c in categories]
    if not primaries:
        return "pointwise" if "pointwise" in categories else "other"
    label = primaries[0]
    # a second primary (gemm followed by a reduction, say) matters more than pointwise extras
    if len(primaries) > 1:
        label += "+" + primaries[1]
    elif "pointwise" in categories:
        label += "+pointwise"
    return label


def problem_class(sig_or_ops: dict[str, Any] | list[str] | tuple[str, ...]) -> str:
    """The problem's class (one of CLASSES) from a signature's ops or from an op list. It is computed from the
    ops, so a signature stored by an older version (whose kind called a pooling problem a reduction) gets
    today's class; a signature without ops falls back to the class its stored kind names."""
    if isinstance(sig_or_ops, dict):
        ops = sig_or_ops.get("ops")
        if not ops:
            stored = (sig_or_ops.get("kind") or "").split("+")[0]
            return stored if stored in CLASSES else "other"
    else:
        ops = sig_or_ops
    return kind_of(list(ops)).split("+")[0]


def _tensor_facts(value: Any) -> list[dict[str, Any]]:
    import torch

    if isinstance(value, torch.Tensor):
        return [{"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}]
    if isinstance(value, (list, tuple)):
        return [fact for v in value for fact in _tensor_facts(v)]
    if isinstance(value, dict):
        return [fact for v in value.values() for fact in _tensor_facts(v)]
    return []


def record_ops(model, inputs: list) -> tuple[list[str], Any]:
    """Run model(*inputs) once, recording the ATen ops dispatched (consecutive repeats collapsed)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: list[str] = []

    class _Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket)  # "aten.addmm"
            if not ops or ops[-1] != name:
                ops.append(name)
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), _Recorder():
        outputs = model(*inputs)
    return ops, outputs


def tokens(text: str) -> list[str]:
    """Lower-case word tokens for BM25 ("aten.addmm" -> "addmm", "gemm+pointwise" -> "gemm", "pointwise")."""
    return [t for t in re.split(r"[^a-z0-9_]+", text.lower()) if len(t) > 1 and t != "aten"]


def signature_text(sig: dict[str, Any]) -> str:
    parts = [sig.get("kind", ""), *sig.get("categories", []), *(short_name(op) for op in sig.get("ops", [])),
             *sig.get("modules", []), sig.get("doc", "")]
    return " ".join(tokens(" ".join(p for p in parts if p)))


def _recorded(problem, seed: int, device: str) -> tuple[Any, Any, list, tuple[list[str], Any]]:
    """The problem's module, model and inputs built on `device` (tensors created in __init__ and get_inputs()
    land there), and the ops of one forward."""
    import torch

    from kfoundry.problem import build_model, init_inputs_of, load_problem_module, make_inputs, on_host

    with on_host(device):  # the main process never touches the GPU, whatever the problem asks
        module = load_problem_module(problem)
        with torch.device(device):
            model = build_model(module.Model, init_inputs_of(module), seed, None, device, eval_mode=False)
            inputs = make_inputs(module, seed, None, device)
        return module, model, inputs, record_ops(model, inputs)


def signature(problem_path: str | Path, set_values: dict[str, Any] | None = None, device: str = "cpu",
              seed: int = 0) -> dict[str, Any]:
    """The signature of a problem file, its --set overrides applied. It is recorded on the meta device first
    (shapes only: nothing allocated or computed, so a problem of several GB costs nothing), and on `device`
    where the forward needs real data."""
    from kfoundry.problem import read_problem

    problem = read_problem(problem_path, set_values)
    try:
        module, model, inputs, (ops, outputs) = _recorded(problem, seed, "meta")
    except Exception:  # noqa: BLE001 -- data-dependent code (an .item(), a nonzero): run it for real
        module, model, inputs, (ops, outputs) = _recorded(problem, seed, device)
    modules = sorted({type(m).__name__.lower() for m in model.modules() if type(m).__name__ != "Model"})
    doc = (module.__doc__ or "").strip().splitlines()
    sig: dict[str, Any] = {
        "problem": problem.name,
        "set": dict(problem.overrides),
        "ops": ops,
        "compute_ops": compute_ops(ops),
        "kind": kind_of(ops),
        "categories": sorted(set(op_categories(ops)) - {"layout"}),
        "modules": modules,
        "doc": doc[0] if doc else "",
        "inputs": _tensor_facts(inputs),
        "outputs": _tensor_facts(outputs),
        "parameters": [{"name": name, **_tensor_facts(p)[0]} for name, p in model.named_parameters()],
    }
    sig["text"] = signature_text(sig)
    return sig
