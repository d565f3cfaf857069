"""Dynamic checks, run inside the candidate's worker: what ran during forward.

- `LaunchTracker` wraps Triton's launch path (JIT, interpreter, autotuner, heuristics) and the
  functions of extensions built by `load_inline`/`load`: it counts the candidate's kernel launches,
  pauses the op recorder inside them (Triton's interpreter issues ATen ops per launch), and in
  ghost mode turns them into no-ops (Triton) or poisons what they return and the buffers of this
  forward they were handed (extensions).
- `OpRecorder` records the ATen ops run during forward outside those launches, and fills every
  tensor forward allocates uninitialised with poison: memory the kernels do not write reads as
  NaN, never as what an earlier call left there (a caching allocator hands that back).
- `held_storages` / `kept_outputs`: outputs that are tensors the model keeps between calls.
- `global_state` snapshots the flags and the timing functions a candidate must not change.
- `profile_kernels` (GPU) names the kernels and streams a forward used.
- `GraphWatch` (graph_watch.py): a CUDA graph's replays count the launches its capture recorded, and in ghost
  mode run nothing and poison the graph's memory.
"""

from __future__ import annotations

import functools
import re
import time
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kfoundry.guard.allowlist import ATEN_ALLOWED, aten_name
from kfoundry.guard.graph_watch import GraphWatch
from kfoundry.guard.launch_spec import launch_spec
from kfoundry.guard.tensors import fill_poison, storage_of, tensors_in

# ATen ops whose result is new storage with undefined contents (zeros, full, ... define theirs)
UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                           "new_empty_strided"})
RESIZING = frozenset({"resize_", "resize_as_", "_resize_output_"})  # what they grow is undefined
LIBRARY_KERNEL = re.compile(r"cublas|cutlass|cudnn|xmma|nvjet|magma|cutensor|gemm|gemv|conv|winograd|implicit_convolve",
                            re.IGNORECASE)


class LaunchTracker:
    def __init__(self) -> None:
        self.depth = 0
        self.extension_depth = 0  # inside an extension's function (its C++ allocations reach the recorder)
        self.launches = 0
        self.extension_calls = 0
        self.ghost = False
        self.kernel_names: set[str] = set()
        self.compiled: dict[str, Any] = {}  # kernel name -> the last CompiledKernel its launch returned
        # kernel name -> its last launch through the interpreter (CPU), as kfoundry.guard.launch_spec
        # describes it (None: an argument it cannot stand in for): what a compile for the target GPU needs
        self.interpreted: dict[str, dict[str, Any] | None] = {}
        self.protected: set[int] = set()  # ids of the forward's inputs, never poisoned
        self.fresh: set[int] = set()  # storages (data pointers) created by the recorded forward's ops
        self._undo: list[Callable[[], None]] = []
        self.graphs = GraphWatch(self)  # CUDA graphs: their launches and replays

    # -- Triton ----------------------------------------------------------------------------
    def _wrap_run(self, cls: type) -> None:
        original = cls.run
        tracker = self
        try:
            from triton.runtime.interpreter import InterpretedFunction as interpreted
        except ImportError:
            interpreted = None

        @functools.wraps(original)
        def run(self_fn, *args, **kwargs):
            outermost = tracker.depth == 0
            if outermost:
                name = getattr(getattr(self_fn, "fn", self_fn), "__name__", None)
                if not tracker.graphs.launched(name):  # captured in a graph, it runs when the graph replays
                    tracker.launches += 1
                    if name:
                        tracker.kernel_names.add(name)
                    if tracker.ghost and not kwargs.get("warmup"):
                        return None
            tracker.depth += 1
            try:
                result = original(self_fn, *args, **kwargs)
            finally:
                tracker.depth -= 1
            kernel_name = getattr(getattr(self_fn, "fn", self_fn), "__name__", None) or "kernel"
            if hasattr(result, "metadata"):  # a compiled kernel (GPU): its registers, spills, shared memory
                tracker.compiled[kernel_name] = result
            elif interpreted is not None and isinstance(self_fn, interpreted):
                tracker.interpreted[kernel_name] = launch_spec(args, kwargs)
            return result

        cls.run = run
        self._undo.append(lambda: setattr(cls, "run", original))

    def install(self) -> "LaunchTracker":
        try:
            from triton.runtime import autotuner, jit

            classes = [jit.JITFunction, autotuner.Autotuner, autotuner.Heuristics]
            try:
                from triton.runtime import interpreter

                classes.append(interpreter.InterpretedFunction)
            except ImportError:
                pass
            for cls in classes:
                if "run" in vars(cls):
                    self._wrap_run(cls)
        except ImportError:
            pass
        self._wrap_extension_builders()
        try:
            from torch.cuda.graphs import CUDAGraph
        except ImportError:
            CUDAGraph = None
        if CUDAGraph is not None:
            self._undo.append(self.graphs.install(CUDAGraph))
        return self

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    # -- extensions (load_inline / load) ----------------------------------------------------
    def _wrap_extension_builders(self) -> None:
        from torch.utils import cpp_extension

        for name in ("load_inline", "load"):
            original = getattr(cpp_extension, name)
            tracker = self

            def builder(*args, _original=original, **kwargs):
                return ExtensionProxy(_original(*args, **kwargs), tracker)

            functools.update_wrapper(builder, original)
            setattr(cpp_extension, name, builder)
            self._undo.append(lambda n=name, o=original: setattr(cpp_extension, n, o))

    def call_extension(self, fn: Callable, args: tuple, kwargs: dict) -> Any:
        outermost = self.depth == 0
        if outermost:
            self.launches += 1
            self.extension_calls += 1
        self.depth += 1
        self.extension_depth += 1
        try:
            result = fn(*args, **kwargs)
        finally:
            self.depth -= 1
            self.extension_depth -= 1
        if outermost and self.ghost:
            # what the kernel wrote is lost: its results, and the buffers this forward allocated and
            # handed to it (an out= style kernel). Never the inputs, nor what the model holds (its
            # weights): a kept output is judged by the guard's second look (kept_outputs)
            for tensor in tensors_in(result):
                if id(tensor) not in self.protected:
                    fill_poison(tensor)
            for tensor in tensors_in(list(args) + list(kwargs.values())):
                if id(tensor) not in self.protected and storage_of(tensor) in self.fresh:
                    fill_poison(tensor)
        return result


def held_storages(model: torch.nn.Module) -> set[int]:
    """The storages of every tensor the model holds between calls: parameters, buffers and tensor
    attributes of its modules (also in lists, tuples and dicts)."""
    held = {storage_of(t) for module in model.modules() for t in tensors_in(vars(module))}
    held.discard(0)
    return held


def kept_outputs(out: Any, held: set[int]) -> list[torch.Tensor]:
    """The output tensors that live in storage the model holds: a buffer the kernels rewrite on every
    call, or a value computed once and returned again."""
    return [t for t in tensors_in(out) if t.numel() and storage_of(t) in held]


class ExtensionProxy:
    """Stands for a compiled extension module: its functions go through the tracker."""

    def __init__(self, module: Any, tracker: LaunchTracker) -> None:
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_tracker", tracker)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if callable(value) and not isinstance(value, type):
            tracker = self._tracker

            @functools.wraps(value)
            def call(*args, **kwargs):
                return tracker.call_extension(value, args, kwargs)

            return call
        return value


class OpRecorder(TorchDispatchMode):
    """Records the ATen ops that run outside the candidate's own launches, and poisons every tensor
    forward allocates uninitialised: in Python, and in an extension's C++ (at::empty goes through the
    dispatcher too), not in Triton's interpreter. One `with` per forward."""

    def __init__(self, tracker: LaunchTracker) -> None:
        super().__init__()
        self.tracker = tracker
        self.ops: dict[str, int] = {}

    def __enter__(self):
        self.tracker.fresh = set()
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inside = self.tracker.depth != 0
        if inside and not self.tracker.extension_depth:  # Triton's interpreter at work
            return func(*args, **kwargs)
        name = aten_name(func)
        if not inside:
            self.ops[name] = self.ops.get(name, 0) + 1
        resized = args[0] if name in RESIZING and args and isinstance(args[0], torch.Tensor) else None
        before = (storage_of(resized), resized.untyped_storage().nbytes()) if resized is not None else None
        out = func(*args, **kwargs)
        if name in UNINITIALISED and isinstance(out, torch.Tensor):
            fill_poison(out)
        returned = tensors_in(out if isinstance(out, (tuple, list)) else [out])
        for tensor, schema in zip(returned, func._schema.returns):
            if schema.alias_info is None:  # new storage, not a view nor an argument written in place
                self.tracker.fresh.add(storage_of(tensor))
        if resized is not None and id(resized) not in self.tracker.protected:
            self._grown(resized, *before)
        return out

    def _grown(self, tensor: torch.Tensor, old_storage: int, old_nbytes: int) -> None:
        """After a resize: poison the bytes its storage gained (what it had is kept, and defined)."""
        storage = tensor.untyped_storage()
        size = tensor.element_size()
        if storage.data_ptr() != old_storage:
            self.tracker.fresh.add(storage.data_ptr())
        if storage.nbytes() <= old_nbytes or size == 0:
            return
        whole = tensor.new_empty(0).set_(storage, 0, (storage.nbytes() // size,), (1,))
        fill_poison(whole[-(-old_nbytes // size):])

    def compute_ops(self) -> list[str]:
        return sorted(name for name in self.ops if name not in ATEN_ALLOWED)


def _flush_denormal_on() -> bool:
    tiny = torch.tensor([1e-40], dtype=torch.float32)
    return bool((tiny * 1.0).item() == 0.0)


TIMING_FUNCTIONS = {
    "time.perf_counter": lambda: time.perf_counter,
    "time.perf_counter_ns": lambda: time.perf_counter_ns,
    "time.time": lambda: time.time,
    "time.monotonic": lambda: time.monotonic,
    "torch.cuda.synchronize": lambda: torch.cuda.synchronize,
    "torch.cuda.Event": lambda: torch.cuda.Event,
    "torch.cuda.Event.record": lambda: torch.cuda.Event.record,
    "torch.cuda.Event.elapsed_time": lambda: torch.cuda.Event.elapsed_time,
    "torch.cuda.Event.synchronize": lambda: torch.cuda.Event.synchronize,
    "torch.cuda.current_stream": lambda: torch.cuda.current_stream,
}


def global_state() -> dict[str, Any]:
    """Flags and function identities that must be the same before and after the candidate runs."""
    state: dict[str, Any] = {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.backends.cudnn.enabled": torch.backends.cudnn.enabled,
        "torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark,
        "torch.backends.cudnn.deterministic": torch.backends.cudnn.deterministic,
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32 matmul precision": torch.get_float32_matmul_precision(),
        "number of threads": torch.get_num_threads(),
        "default dtype": str(torch.get_default_dtype()),
        "flush denormal": _flush_denormal_on(),
    }
    for name, get in TIMING_FUNCTIONS.items():
        try:
            state[name] = id(get())
        except AttributeError:
            state[name] = None
    return state


def state_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    changes = []
    for key, value in before.items():
        if after.get(key) != value:
            if key in TIMING_FUNCTIONS:
                changes.append(f"{key} was replaced")
            else:
                changes.append(f"{key}: {value} -> {after.get(key)}")
    return changes


def profile_kernels(fn: Callable[[], Any]) -> dict[str, Any]:
    """GPU: the kernels one call of fn launched, in order, with their streams and durations in µs
    (from the profiler's trace)."""
    import json
    import os
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as handle:
            trace = json.load(handle)
    finally:
        os.unlink(path)
    kernels = []
    for event in trace.get("traceEvents", []):
        if event.get("cat") == "kernel":
            kernels.append({"name": event.get("name", ""), "stream": (event.get("args") or {}).get("stream"),
                            "duration_us": event.get("dur")})
    return {"kernels": kernels, "streams": sorted({k["stream"] for k in kernels if k["stream"] is not None})}


def library_kernels(kernels: list[dict[str, Any]], own_names: set[str]) -> list[str]:
    """Names of library kernels (cuBLAS, cuDNN, CUTLASS, ...) the candidate did not write."""
    found = []
    for kernel in kernels:
        name = kernel["name"]
        if any(own and own in name for own in own_names):
            continue
        if LIBRARY_KERNEL.search(name) and name not in found:
            found.append(name)
    return found


def cuda_kernel_names(source: str) -> set[str]:
    """`__global__ void name(` in CUDA sources inside the candidate."""
    return set(re.findall(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(\w+)", source))
