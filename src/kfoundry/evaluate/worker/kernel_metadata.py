"""Worker side: what the compiled Triton kernels cost (warps, stages, registers, spills, shared memory).

Reads Triton 3.x CompiledKernel objects (what a JITFunction's launch returns): `metadata` holds
num_warps, num_stages and shared; n_regs and n_spills appear on the object once its binary is
loaded (`_init_handles()`, GPU only). Anything missing is None; nothing here raises.
"""

from __future__ import annotations

from typing import Any

FIELDS = ("num_warps", "num_stages", "n_regs", "n_spills", "shared_bytes")


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError, OverflowError):
        return None


def _loaded(kernel: Any) -> None:
    """Load the binary if the launch has not (n_regs and n_spills come from loading it)."""
    if getattr(kernel, "n_regs", None) is not None:
        return
    init = getattr(kernel, "_init_handles", None)
    if callable(init):
        try:
            init()
        except Exception:
            pass


def kernel_metadata(name: str, kernel: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"name": name, **{key: None for key in FIELDS}}
    try:
        metadata = getattr(kernel, "metadata", None)
        if metadata is None:
            return row
        _loaded(kernel)
        row["num_warps"] = _int(getattr(metadata, "num_warps", None))
        row["num_stages"] = _int(getattr(metadata, "num_stages", None))
        row["shared_bytes"] = _int(getattr(metadata, "shared", None))
        row["n_regs"] = _int(getattr(kernel, "n_regs", None))
        row["n_spills"] = _int(getattr(kernel, "n_spills", None))
    except Exception:
        pass
    return row


def triton_metadata(compiled: dict[str, object]) -> list[dict[str, Any]]:
    """One row per kernel: {"name", "num_warps", "num_stages", "n_regs", "n_spills", "shared_bytes"}."""
    try:
        items = list((compiled or {}).items())
    except Exception:
        return []
    return [kernel_metadata(str(name), kernel) for name, kernel in items]
