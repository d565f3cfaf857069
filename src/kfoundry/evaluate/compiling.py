"""In a candidate's worker, compiling gives up the GPU lock: it is CPU work.

A candidate's first call compiles its Triton kernels (seconds each), and an extension built with
`torch.utils.cpp_extension.load_inline` or `load` runs nvcc (tens of seconds). Both happen inside a
shared GPU phase, and a timing waits for every shared phase to end: with several workers compiling
at once the GPU was nearly always held by one of them and the timings queued behind compilers.
Wrapped here, each compile runs with the shared hold given up (`GpuLock.off_gpu`) and takes it back
after. Triton's autotuning still benchmarks its configurations inside the shared phase: that is GPU
work.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def compile_off_gpu(lock: Any) -> Callable[[], None]:
    """Wrap Triton's compile step and the extension builders; returns what undoes it."""
    undo: list[Callable[[], None]] = []

    def wrap(owner: Any, name: str, phase: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with lock.off_gpu(phase):
                return original(*args, **kwargs)

        setattr(owner, name, wrapped)
        undo.append(lambda: setattr(owner, name, original))

    try:
        from triton.runtime.jit import JITFunction

        wrap(JITFunction, "_do_compile", "triton compile")  # where a launch compiles what it has not seen
    except ImportError:
        pass
    from torch.utils import cpp_extension

    for name in ("load_inline", "load"):
        wrap(cpp_extension, name, "extension build")

    def restore() -> None:
        while undo:
            undo.pop()()

    return restore
