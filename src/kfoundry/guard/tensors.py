"""Tensors as the dynamic guard handles them: poisoned, located by storage, found inside a value."""

from __future__ import annotations

from typing import Any

import torch


def fill_poison(tensor: torch.Tensor) -> None:
    """NaN (floats, complex) or a sentinel (integers, bool): what no kernel is expected to write."""
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.fill_(float("nan"))
    elif tensor.dtype == torch.bool:
        tensor.fill_(True)
    elif tensor.dtype == torch.uint8:
        tensor.fill_(255)
    else:
        try:
            tensor.fill_(torch.iinfo(tensor.dtype).max // 2)
        except TypeError:  # quantized and other dtypes with no integer range: left as they are
            pass


def storage_of(tensor: torch.Tensor) -> int:
    """Where a tensor's storage begins (0 for none): views of one storage share it."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def tensors_in(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """The tensors in a value, in lists, tuples and dicts (a few levels deep)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth > 3:
        return []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item, depth + 1)]
    return []
