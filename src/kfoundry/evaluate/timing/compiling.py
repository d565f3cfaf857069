"""In our GPU processes, compiling gives up the GPU lock: it is CPU work.

A candidate's first call compiles its Triton kernels (seconds each), builds each kernel's launcher
(a C file through gcc, in a worker's private Triton cache), and an extension built with
`torch.utils.cpp_extension.load_inline` or `load` runs nvcc (tens of seconds). The judge compiles
its comparison kernel, and the baseline process's torch.compile lowers the reference and compiles
its kernels (seconds to tens of seconds). All of it happens inside a shared GPU phase, and a timing
waits for every shared phase to end; worse, a timing that waits holds every later shared request
back, so one long compile stalled the whole GPU (seen on the H200: torch.compile's first call held
the lock for 8 s). Wrapped here, each compile runs with the shared hold given up
(`GpuLock.off_gpu`) and takes it back after. Benchmarking stays GPU work: Triton's autotuning runs in
the shared phase it was called in, and inductor's benchmarks during its compile take a shared hold
of their own.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

# the names compiles are counted under
PHASES = ("triton compile", "triton launcher build", "extension build", "inductor compile")


def compile_off_gpu(lock: Any, seconds: Counter | None = None, inductor: bool = False) -> Callable[[], None]:
    """Wrap Triton's compile steps, its launcher builds and the extension builders (with `inductor`, also
    torch.compile's compiler: only the baseline process needs it, and importing it costs a worker a
    second); returns what undoes it. With `seconds`, each compile's wall time is added under its phase
    (one of PHASES)."""
    undo: list[Callable[[], None]] = []

    def wrap(owner: Any, name: str, phase: str, on_gpu: bool = False) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return

        @functools.wraps(original)
        def off(*args: Any, **kwargs: Any) -> Any:
            with lock.off_gpu(phase):  # taking the lock back after is counted as the lock's wait, not here
                started = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    if seconds is not None:
                        seconds[phase] += time.perf_counter() - started

        @functools.wraps(original)
        def on(*args: Any, **kwargs: Any) -> Any:
            with lock.shared(phase):
                return original(*args, **kwargs)

        setattr(owner, name, on if on_gpu else off)
        undo.append(lambda: setattr(owner, name, original))

    try:
        import triton
        from triton.runtime.jit import JITFunction

        wrap(JITFunction, "_do_compile", "triton compile")  # where a launch compiles what it has not seen
        wrap(triton, "compile", "triton compile")  # what torch.compile's generated code calls
    except ImportError:
        pass
    try:
        from triton.backends.nvidia import driver as nvidia_driver

        wrap(nvidia_driver, "compile_module_from_src", "triton launcher build")  # a kernel's first launch
    except Exception:  # noqa: BLE001 -- no CUDA backend in this Triton: nothing to wrap
        pass
    from torch.utils import cpp_extension

    for name in ("load_inline", "load"):
        wrap(cpp_extension, name, "extension build")
    if inductor:
        try:
            from torch._inductor import compile_fx
            from torch._inductor.runtime.benchmarking import benchmarker

            wrap(compile_fx, "compile_fx", "inductor compile")
            wrap(benchmarker, "benchmark_gpu", "inductor benchmark", on_gpu=True)
        except (ImportError, AttributeError):
            pass

    def restore() -> None:
        while undo:
            undo.pop()()

    return restore


def shared_memory_limit() -> int:
    """The current GPU's shared memory per block, as Triton checks it at a kernel's first launch."""
    from triton.compiler.compiler import max_shared_mem
    from triton.runtime.driver import driver

    return max_shared_mem(driver.active.get_current_device())


def fail_fast_over_shared_memory() -> Callable[[], None]:
    """A Triton kernel that needs more shared memory than the GPU has fails before its machine code is made,
    not after: Triton knows the figure once the kernel is lowered to LLVM IR, but only raises at the first
    launch, after LLVM's code generation and ptxas, which for the huge tiles of such a kernel (a tuner child
    asking for 320 KB) took tens of seconds. The error is Triton's own `OutOfResources`, with its message,
    so the verdict and its diagnosis are what they were, and an autotuner still prunes that config. Returns
    what undoes it; a no-op without Triton's CUDA backend."""
    try:
        from triton.backends.nvidia.compiler import CUDABackend
        from triton.runtime.errors import OutOfResources
    except Exception:  # noqa: BLE001 -- no CUDA backend in this Triton: nothing to check early
        return lambda: None
    original = CUDABackend.make_ptx

    @functools.wraps(original)
    def make_ptx(self: Any, src: Any, metadata: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        needed = metadata.get("shared") or 0
        if needed:
            limit = shared_memory_limit()
            if needed > limit:
                raise OutOfResources(needed, limit, "shared memory")
        return original(self, src, metadata, *args, **kwargs)

    CUDABackend.make_ptx = make_ptx

    def restore() -> None:
        CUDABackend.make_ptx = original

    return restore
