"""What PyTorch names mean to the rules: which tensor attributes and methods give tensors, which torch
functions compute (as opposed to allocate, view, query or configure), which modules give plain values."""

from __future__ import annotations

from ..allowlist import TENSOR_METHODS, TORCH_FUNCTIONS

TENSOR_SCALAR_ATTRS = frozenset({
    "shape", "dtype", "device", "ndim", "is_cuda", "layout", "requires_grad", "is_leaf", "itemsize",
    "nbytes", "names", "is_sparse", "is_quantized", "is_meta", "grad_fn", "is_nested", "output_nr",
})
TENSOR_VIEW_ATTRS = frozenset({"T", "mT", "H", "mH", "data", "real", "imag", "grad"})
# tensor methods whose result is not a tensor
TENSOR_QUERY_METHODS = frozenset({
    "size", "stride", "dim", "ndimension", "numel", "nelement", "element_size", "storage_offset",
    "data_ptr", "is_contiguous", "is_floating_point", "is_complex", "get_device", "item", "tolist",
    "is_pinned", "is_shared", "untyped_storage", "storage", "dim_order", "is_same_size", "is_set_to",
    "is_inference", "is_meta", "is_sparse", "is_quantized",
})
# methods that only tensors have: on an unknown receiver they make a tensor
TENSOR_ONLY_METHODS = frozenset({
    "contiguous", "view", "view_as", "expand", "expand_as", "permute", "unsqueeze", "new_empty",
    "new_zeros", "new_ones", "new_full", "new_empty_strided", "reshape_as", "narrow", "clone", "detach",
    "type_as",
})
# unmistakable tensor compute: a finding even when the receiver's kind is unknown
LIKELY_TENSOR_COMPUTE = frozenset({
    "sum", "mean", "exp", "exp_", "exp2", "log_softmax", "softmax", "matmul", "mm", "bmm", "addmm",
    "addmm_", "baddbmm", "baddbmm_", "addbmm", "mv", "addmv", "relu", "relu_", "gelu", "silu", "sigmoid",
    "sigmoid_", "tanh", "tanh_", "clamp", "clamp_", "clamp_min", "clamp_max", "clip", "clip_", "sqrt",
    "sqrt_", "rsqrt", "rsqrt_", "pow", "pow_", "mul", "mul_", "add_", "sub_", "div", "div_", "neg",
    "neg_", "abs", "abs_", "amax", "amin", "argmax", "argmin", "max", "min", "var", "std", "norm", "prod",
    "cumsum", "cumprod", "logsumexp", "masked_fill", "masked_fill_", "where", "topk", "addcmul",
    "addcmul_", "addcdiv", "lerp", "lerp_", "einsum", "softplus", "erf", "erf_", "reciprocal", "square",
    "outer", "dot", "log1p", "expm1", "log2", "log10", "sin", "cos", "floor", "ceil", "trunc", "sign",
    "maximum", "minimum", "fmod", "remainder", "logical_and", "logical_or", "logical_not", "index_select",
    "gather", "scatter", "scatter_", "scatter_add", "scatter_add_", "index_add", "index_add_",
    "masked_select", "nonzero", "triu", "tril", "flip", "roll", "repeat_interleave", "hardtanh",
    "leaky_relu", "elu", "selu", "mish", "hardswish", "hardsigmoid", "logit", "nan_to_num",
    "count_nonzero", "allclose", "isclose", "normal_", "uniform_", "bernoulli", "bernoulli_",
    "__matmul__", "__rmatmul__", "__add__", "__radd__", "__iadd__", "__mul__", "__rmul__", "__imul__",
    "__sub__", "__rsub__", "__isub__", "__truediv__", "__rtruediv__", "__itruediv__", "__floordiv__",
    "__mod__", "__pow__", "__rpow__", "__neg__", "__abs__", "__and__", "__or__", "__xor__", "__invert__",
})
_DUNDER_COMPUTE = frozenset(m for m in LIKELY_TENSOR_COMPUTE if m.startswith("__")) | {
    "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__getitem__", "__setitem__",
}
NN_CALL_METHODS = frozenset({"forward", "__call__", "_call_impl", "_conv_forward", "_wrapped_call_impl"})
STREAM_METHODS = frozenset({"wait_stream", "record_stream", "wait_event", "record_event"})

# torch.<name> that other rules judge (global-state, io-network) or that only read (torch.load)
_DELEGATED_TOP = frozenset({"save", "load", "manual_seed", "seed", "use_deterministic_algorithms"})
# torch.<name>(...) whose result is not a tensor
TORCH_QUERY_FUNCS = frozenset({
    "is_tensor", "is_floating_point", "is_complex", "numel", "result_type", "promote_types", "can_cast",
    "finfo", "iinfo", "device", "dtype", "Size", "get_default_dtype", "broadcast_shapes", "no_grad",
    "inference_mode", "enable_grad", "is_grad_enabled", "set_grad_enabled", "is_inference_mode_enabled",
    "autocast", "get_device", "get_default_device", "get_num_threads", "get_num_interop_threads",
    "get_float32_matmul_precision", "are_deterministic_algorithms_enabled", "get_rng_state", "initial_seed",
    "typename", "is_storage", "compiled_with_cxx11_abi", "sym_int", "sym_float", "sym_max", "sym_min",
    "sym_not",
}) | _DELEGATED_TOP
_COMPUTE_PREFIXES = (
    "torch.nn.functional.", "torch.functional.", "torch.linalg.", "torch.special.", "torch.fft.",
    "torch.sparse.", "torch.nested.", "torch.masked.", "torch.ops.aten.", "torch.ops.prims.",
    "torch._C._nn.", "torch._C._VariableFunctions.", "torch._C._linalg.", "torch._C._special.",
    "torch._C._fft.", "torch._refs.", "torch._prims.", "torch._decomp.", "torch.nn.init.", "torch.func.",
    "torch._ops.ops.aten.",
)
_TORCH_COMPUTE_EXACT = frozenset({"torch.compile", "torch.vmap"})
# modules whose calls give plain Python values
SCALAR_MODULES = frozenset({
    "math", "cmath", "triton", "operator", "random", "os", "sys", "time", "functools", "itertools",
    "collections", "typing", "dataclasses", "enum", "string", "re", "json", "struct", "warnings",
    "logging", "numbers", "fractions", "decimal", "builtins",
})
SUBCLASS_NAMES = frozenset({"_make_subclass", "_make_wrapper_subclass", "as_subclass", "__torch_function__",
                            "__torch_dispatch__", "TorchDispatchMode", "TorchFunctionMode"})


def nn_layer(qn: str | None) -> str | None:
    """'torch.nn.Linear' / 'torch.nn.modules.linear.Linear' -> 'Linear' (classes under torch.nn)."""
    if not qn or not qn.startswith("torch.nn."):
        return None
    parts = qn.split(".")
    if parts[2] in ("functional", "init", "utils", "parameter", "Parameter", "Buffer", "attention"):
        return None
    last = parts[-1]
    return last if last[:1].isupper() else None


def torch_compute(qn: str) -> bool:
    """Does calling this torch qualname compute (as opposed to allocate, view, query, configure)?"""
    parts = qn.split(".")
    if parts[0] != "torch" or len(parts) < 2:
        return False
    if qn.startswith("torch.Tensor.") and len(parts) == 3:
        m = parts[2]
        if m.startswith("__") and m.endswith("__"):
            return m in _DUNDER_COMPUTE
        return m not in TENSOR_METHODS
    if qn in _TORCH_COMPUTE_EXACT or qn.startswith(_COMPUTE_PREFIXES):
        return True
    if len(parts) == 2:
        name = parts[1]
        if name in TORCH_FUNCTIONS or name in _DELEGATED_TOP or name[:1].isupper():
            return False
        if name.startswith(("set_", "_set")):
            return False  # global-state's business
        return True
    return False


def weightish(attr: str) -> bool:
    return attr in ("weight", "bias", "running_mean", "running_var", "in_proj_weight", "in_proj_bias") or \
        attr.startswith(("weight_", "bias_")) or attr.endswith(("_weight", "_bias"))
