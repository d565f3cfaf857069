"""The one allow-list of what a candidate's host code may do with PyTorch under the strict
policy: allocate, view and reshape, cast, fill, query. Everything else computes.

The static rules read the Python-level names; the dynamic check reads the ATen ops that ran.
"""

from __future__ import annotations

# torch.<name>(...) calls that do not compute
TORCH_FUNCTIONS = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange",  # index helpers for launch set-up, not the problem's computation
    "tensor", "as_tensor", "from_numpy", "as_strided",
    "is_tensor", "is_floating_point", "is_complex", "numel", "result_type", "promote_types", "can_cast",
    "finfo", "iinfo", "device", "dtype", "Size", "get_default_dtype",
    "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "permute", "transpose", "t", "movedim", "swapaxes",
    "narrow", "select", "split", "chunk", "unbind", "broadcast_shapes", "broadcast_to", "view_as_real",
    "view_as_complex", "no_grad", "inference_mode", "enable_grad", "is_grad_enabled",
    # added for the static rules: grad mode, queries, allocation and symbolic-shape helpers
    "set_grad_enabled", "is_inference_mode_enabled", "autocast", "get_device", "get_default_device",
    "get_num_threads", "get_num_interop_threads", "get_float32_matmul_precision",
    "are_deterministic_algorithms_enabled", "get_rng_state", "initial_seed", "typename", "is_storage",
    "compiled_with_cxx11_abi", "empty_permuted", "sym_int", "sym_float", "sym_max", "sym_min", "sym_not",
})
# tensor methods that allocate, view, reshape, cast, fill or query
TENSOR_METHODS = frozenset({
    "size", "stride", "dim", "ndim", "numel", "nelement", "element_size", "storage_offset", "data_ptr",
    "is_contiguous", "is_floating_point", "is_complex", "get_device", "type", "item", "tolist",
    "view", "view_as", "reshape", "reshape_as", "contiguous", "permute", "transpose", "t", "T", "mT",
    "expand", "expand_as", "flatten", "unflatten", "squeeze", "unsqueeze", "movedim", "narrow", "select",
    "split", "chunk", "unbind", "unfold", "as_strided", "detach", "clone", "to", "cuda", "cpu", "float", "half",
    "bfloat16", "double", "int", "long", "short", "bool", "char", "byte", "new_empty", "new_zeros", "new_ones",
    "new_full", "new_tensor", "empty_like", "zero_", "fill_", "copy_", "requires_grad_", "pin_memory",
    "data",
    "shape", "dtype", "device", "is_cuda", "layout",
    # added for the static rules: more queries, casts and in-place views
    "ndimension", "type_as", "new_empty_strided", "untyped_storage", "storage", "is_pinned", "is_shared",
    "dim_order", "is_same_size", "is_set_to", "is_inference", "is_meta", "is_sparse", "is_quantized",
    "squeeze_", "unsqueeze_", "t_", "transpose_", "as_strided_", "resize_", "resize_as_", "swapaxes",
    "swapdims", "moveaxis",
})
# nn modules that hold parameters or do nothing: reading them is fine, calling them computes
NN_NONCOMPUTE_MODULES = frozenset({"Identity", "Module", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"})

# ATen ops (overload packets) that may run during forward outside the candidate's own kernels
ATEN_ALLOWED = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "scalar_tensor", "arange", "lift_fresh",
    "lift_fresh_copy", "_to_copy", "to", "clone", "copy_", "copy", "zero_", "fill_", "fill", "detach", "alias",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "permute", "transpose", "t",
    "unsqueeze", "squeeze", "flatten", "unflatten", "slice", "select", "narrow", "split", "split_with_sizes",
    "chunk", "unbind", "movedim", "contiguous", "view_as_real", "view_as_complex", "unfold", "set_", "_local_scalar_dense",
    "resize_", "is_same_size", "sym_size", "sym_stride", "sym_numel",
    "_has_compatible_shallow_copy_type", "is_pinned", "_pin_memory",
})


def aten_name(op) -> str:
    """'aten::add.Tensor' -> 'add' (the overload packet's name)."""
    name = getattr(op, "__name__", str(op))
    name = name.split("::")[-1]
    return name.split(".")[0]
