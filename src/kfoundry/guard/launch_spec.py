"""A Triton launch as JSON, as the launch tracker sees it on a CPU (through the interpreter): what
kfoundry.evaluate.worker.target_compile needs to compile the same kernel for the target GPU in another process."""

from __future__ import annotations

from typing import Any

LAUNCH_OPTIONS = ("grid", "warmup")  # the interpreter's launch arguments, not the kernel's


def launch_spec(args: tuple, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """A launch as JSON: each argument's kind (a pointer's dtype and 16-byte alignment, a scalar's value, a
    constant), and the keyword ones (constants, num_warps, num_stages). None where an argument is of a kind the
    child could not stand in for (it then derives nothing for that kernel)."""
    described = [_argument(a) for a in args]
    named = {k: _argument(v) for k, v in kwargs.items() if k not in LAUNCH_OPTIONS}
    if any(d is None for d in described) or any(d is None for d in named.values()):
        return None
    return {"args": described, "kwargs": named}


def _argument(value: Any) -> dict[str, Any] | None:
    if value is None:
        return {"none": True}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, float):
        return {"float": value}
    if isinstance(value, str):
        return {"str": value}
    data_ptr = getattr(value, "data_ptr", None)
    dtype = getattr(value, "dtype", None)
    if callable(data_ptr) and dtype is not None and type(dtype).__module__ == "torch":
        return {"tensor": str(dtype).removeprefix("torch."), "aligned": data_ptr() % 16 == 0}
    constant = getattr(value, "value", None)  # tl.constexpr
    if type(value).__name__ == "constexpr" and isinstance(constant, (bool, int, float, str)):
        return _argument(constant)
    if type(value).__module__.startswith("triton") and type(value).__name__ == "dtype":
        return {"tl_dtype": str(getattr(value, "name", value))}
    return None
