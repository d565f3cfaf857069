"""How tensors cross between a candidate's worker and the judge, which never share a Python object.

A value (a forward's outputs, a trial's inputs) is described by a JSON tree whose leaves are plain
values or tensor descriptors. Two kinds of descriptor:

- `ipc` (GPU): a CUDA IPC handle of memory the *worker* allocated. The judge maps it, reads the
  candidate's outputs from it, or copies a trial's inputs into it. Nothing crosses the host: an
  output of 2 GB is compared in milliseconds. The candidate is never given a handle to the judge's
  memory (which holds the expected outputs); data flows to it only by the judge writing into
  buffers the worker owns.
- `file` (CPU, or a GPU where CUDA IPC does not work): a `torch.save` file in the worker's own
  folder, read with `weights_only=True` and deleted once judged, so at most one or two outputs of a
  worker are ever on disk.

Descriptors come from an untrusted process: everything in them is checked (types, dtype names,
shapes) before use, and a tensor is rebuilt only within the storage it names.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool)}
JSON_LEAVES = (bool, int, float, str, type(None))


class TransportError(ValueError):
    """A descriptor that cannot be honoured (malformed, or a kind of value the transport cannot carry)."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _checked_dtype(name: Any) -> torch.dtype:
    if not isinstance(name, str) or name not in DTYPES:
        raise TransportError(f"unsupported dtype {name!r}")
    return DTYPES[name]


def _checked_ints(values: Any, what: str) -> list[int]:
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise TransportError(f"{what} must be a list of integers")
    return values


def carriable(value: Any) -> bool:
    """Whether a value's tree holds only tensors and plain JSON values (what a descriptor can carry)."""
    if isinstance(value, torch.Tensor):
        return value.dtype in DTYPES.values()
    if isinstance(value, (list, tuple)):
        return all(carriable(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, JSON_LEAVES)


def describe_tree(value: Any, leaf) -> Any:
    """The JSON tree of `value`, with `leaf(tensor)` for each tensor."""
    if isinstance(value, torch.Tensor):
        return {"tensor": leaf(value)}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [describe_tree(v, leaf) for v in value]}
    if isinstance(value, JSON_LEAVES):
        return {"value": value}
    raise TransportError(f"a {type(value).__name__} cannot be carried (only tensors, lists, tuples, numbers)")


def build_tree(tree: Any, leaf, depth: int = 0) -> Any:
    """The inverse of describe_tree: `leaf(descriptor)` rebuilds each tensor."""
    if depth > 32 or not isinstance(tree, dict) or len(tree) != 1:
        raise TransportError("malformed value descriptor")
    (kind, body), = tree.items()
    if kind == "tensor":
        return leaf(body)
    if kind in ("list", "tuple"):
        if not isinstance(body, list):
            raise TransportError("malformed list descriptor")
        items = [build_tree(item, leaf, depth + 1) for item in body]
        return items if kind == "list" else tuple(items)
    if kind == "value":
        if not isinstance(body, JSON_LEAVES):
            raise TransportError("malformed plain value")
        return body
    raise TransportError(f"unknown descriptor kind {kind!r}")


def tensor_meta(x: torch.Tensor) -> dict[str, Any]:
    return {"dtype": dtype_name(x.dtype), "shape": list(x.shape), "stride": list(x.stride())}


# -- CUDA IPC ------------------------------------------------------------------------------------

def _hex(value: Any) -> Any:
    return value.hex() if isinstance(value, bytes) else value


def share(x: torch.Tensor) -> dict[str, Any]:
    """An IPC descriptor of a CUDA tensor's memory (the worker keeps the tensor alive until judged)."""
    storage = x.untyped_storage()
    handle = [_hex(part) for part in storage._share_cuda_()]
    return {**tensor_meta(x), "offset": x.storage_offset(), "ipc": handle}


def open_shared(desc: Any, device: str) -> torch.Tensor:
    """The tensor an IPC descriptor names, mapped into this process (no copy)."""
    if not isinstance(desc, dict) or not isinstance(desc.get("ipc"), list) or len(desc["ipc"]) != 8:
        raise TransportError("malformed CUDA IPC descriptor")
    dtype = _checked_dtype(desc.get("dtype"))
    shape, stride = _checked_ints(desc.get("shape"), "shape"), _checked_ints(desc.get("stride"), "stride")
    offset = desc.get("offset", 0)
    if len(shape) != len(stride) or not isinstance(offset, int) or offset < 0 or any(s < 0 for s in shape + stride):
        raise TransportError("malformed tensor geometry")
    dev, handle, size, storage_offset, ref_handle, ref_offset, event, sync = desc["ipc"]
    types_ok = (isinstance(dev, int) and isinstance(handle, str) and isinstance(size, int)
                and isinstance(storage_offset, int) and isinstance(ref_handle, str) and isinstance(ref_offset, int)
                and isinstance(event, (str, type(None))) and isinstance(sync, bool))
    if not types_ok:
        raise TransportError("malformed CUDA IPC handle")
    try:
        storage = torch.UntypedStorage._new_shared_cuda(
            torch.device(device).index or 0, bytes.fromhex(handle), size, storage_offset, bytes.fromhex(ref_handle),
            ref_offset, bytes.fromhex(event) if event else b"", sync)
    except (ValueError, RuntimeError) as exc:
        raise TransportError(f"the CUDA IPC handle could not be opened ({exc})") from None
    try:
        return torch.empty(0, dtype=dtype, device=device).set_(storage, offset, shape, stride)
    except RuntimeError as exc:  # a geometry outside the storage
        raise TransportError(f"tensor geometry outside its memory ({exc})") from None


# -- files ---------------------------------------------------------------------------------------

def file_in(folder: Path, name: Any) -> Path:
    """A file named by a descriptor, inside `folder` and nowhere else."""
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise TransportError(f"bad file name {name!r}")
    path = folder / name
    if path.is_symlink() or not path.is_file():
        raise TransportError(f"no file {name!r} in the worker's folder")
    return path


def load_file(folder: Path, name: Any) -> Any:
    try:
        return torch.load(file_in(folder, name), weights_only=True, mmap=True)
    except TransportError:
        raise
    except Exception as exc:
        raise TransportError(f"the file could not be read back as plain tensors ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
