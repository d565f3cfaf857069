"""How much memory an evaluator needs, predicted before anything runs, and how many workers fit.

The problem is built on the meta device (nothing allocated, nothing computed) at the given --set
values: that gives the bytes of one set's inputs (I), outputs (O), outputs in float64 (T, the truth;
T' as the judge keeps it, float32 corrections of float outputs), parameters (W) and the live peak of
one forward (A). The prediction is a sum of named terms over the processes an evaluator starts (the
judge, the baseline process on a GPU, the candidate workers and their spares), each a fixed overhead
plus a multiple of those bytes; the README states it. It never grows with the number of trials,
except where the expected outputs of all S sets are kept (on the GPU, or on the CPU when they are
tiny).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from kfoundry.errors import ProblemError
from kfoundry.evaluate import forkserver
from kfoundry.problem import tensor_bytes

GB = 1e9
# fixed private memory (RssAnon) of one of our processes once torch, triton and the job's modules are
# imported, measured: a CPU worker on the 2-core CI machine, a CUDA worker (context made) on the H200
PROCESS_CPU = 240 << 20
PROCESS_GPU = 430 << 20
CUDA_CONTEXT_GPU = 600 << 20  # device memory a process's CUDA context takes before any tensor
FLUSH_BUFFER = 256 << 20  # the timer's L2 flush buffer
SMALL_RESIDENT = 64 << 20  # on the CPU, expected outputs of all sets are kept only below this
HOST_SHARE = 0.85  # of the available host memory a plan may take
GPU_SHARE = 0.90  # of the free GPU memory
MAX_GPU_WORKERS = 8
JUDGE_SCRATCH = 2 << 30  # the judge's float64 temporaries of a chunked comparison (compare.CHUNK elements)


@dataclass
class ProblemSizes:
    input_bytes: int  # I: one set's input tensors
    output_bytes: int  # O: one set's outputs
    truth_bytes: int  # T: the outputs in float64
    held_truth_bytes: int  # T': the truth as the judge keeps it (float32 corrections: evaluate.truth)
    param_bytes: int  # W: parameters and buffers
    forward_bytes: int  # A: the live peak of one forward (outputs included)

    def describe(self) -> str:
        return (f"inputs {self.input_bytes / GB:.2f} GB, outputs {self.output_bytes / GB:.2f} GB, "
                f"float64 truth {self.truth_bytes / GB:.2f} GB (kept as {self.held_truth_bytes / GB:.2f} GB), "
                f"parameters {self.param_bytes / GB:.2f} GB, "
                f"one forward's peak {self.forward_bytes / GB:.2f} GB")


def _leaves(value: Any) -> list:
    """The tensors of a nested value."""
    import torch

    from kfoundry.evaluate.compare import flatten_outputs

    return [x for x in flatten_outputs(value) if isinstance(x, torch.Tensor)]


def _peak_of(model, inputs: list) -> tuple[Any, int]:
    """Run forward on meta tensors, following which op results are alive: (outputs, peak live bytes)."""
    import weakref

    import torch
    from torch.overrides import TorchFunctionMode

    state = {"live": 0, "peak": 0}

    # a function mode, not a dispatch mode: the first dispatch mode of a process imports torch._dynamo (2 s)
    class Live(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for x in _leaves(out):
                size = x.numel() * x.element_size()
                if x._base is None and size:  # a view shares its base's memory
                    state["live"] += size
                    state["peak"] = max(state["peak"], state["live"])
                    weakref.finalize(x, lambda s=size: state.__setitem__("live", state["live"] - s))
            return out

    with torch.no_grad(), Live():
        out = model(*inputs)
    return out, max(state["peak"], tensor_bytes(out))


def problem_sizes(source, precision: str, eval_mode: bool) -> ProblemSizes:
    """The sizes of one set, from the problem built and run on the meta device; a problem whose forward
    cannot run on meta (data-dependent shapes) is sized by its inputs and parameters, its outputs taken
    as large as its inputs."""
    import torch

    from kfoundry import problem as problems
    from kfoundry.evaluate import truth as truths

    module = problems.load_problem_module(source)
    dtype = problems.torch_dtype(precision)
    with torch.device("meta"):
        init_inputs = problems.init_inputs_of(module)
        model = problems.build_model(module.Model, init_inputs, 0, dtype, "meta", eval_mode)
        inputs = problems.make_inputs(module, 0, dtype, "meta")
    params = tensor_bytes(list(model.parameters())) + tensor_bytes(list(model.buffers()))
    input_bytes = tensor_bytes(inputs)
    try:
        out, peak = _peak_of(model, inputs)
        leaves = _leaves(out)
        output_bytes = tensor_bytes(out)
        truth = sum(x.numel() * 8 if x.is_floating_point() else x.numel() * x.element_size() for x in leaves)
        held = sum(truths.held_bytes(x) for x in leaves)
    except Exception:
        output_bytes, truth, peak = input_bytes, 2 * input_bytes, 3 * input_bytes
        held = truth
    return ProblemSizes(input_bytes, output_bytes, truth, held, params, max(peak, output_bytes))


@dataclass
class MemoryPlan:
    """A prediction of peak memory (host and, on a GPU, device) for an evaluator of one problem."""

    device: str
    sizes: ProblemSizes
    sets: int  # S: input sets (trials + the guard's two)
    workers: int  # candidates evaluated at once
    spares: int  # workers started ahead
    resident: bool  # the judge keeps the expected outputs of all sets
    transport: str  # "ipc" or "file"
    host_terms: dict[str, int] = field(default_factory=dict)
    gpu_terms: dict[str, int] = field(default_factory=dict)  # while candidates are evaluated

    @property
    def host_bytes(self) -> int:
        return sum(self.host_terms.values())

    @property
    def gpu_bytes(self) -> int:
        return sum(self.gpu_terms.values())

    def describe(self) -> str:
        text = (f"{self.workers} worker(s) + {self.spares} spare(s); expected outputs "
                f"{'kept for all ' + str(self.sets) + ' sets' if self.resident else 'computed per set'}; "
                f"host {self.host_bytes / GB:.1f} GB")
        if self.gpu_terms:
            text += f", GPU {self.gpu_bytes / GB:.1f} GB"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"workers": self.workers, "spares": self.spares, "resident": self.resident,
                "transport": self.transport, "sets": self.sets, "host_bytes": self.host_bytes,
                "gpu_bytes": self.gpu_bytes, "host_terms": dict(self.host_terms),
                "gpu_terms": dict(self.gpu_terms), "sizes": vars(self.sizes)}


def _host_terms(s: ProblemSizes, device: str, sets: int, workers: int, spares: int, resident: bool,
                transport: str) -> dict[str, int]:
    I, O, T, W, A = s.input_bytes, s.output_bytes, s.truth_bytes, s.param_bytes, s.forward_bytes
    H = s.held_truth_bytes
    gpu = device.startswith("cuda")
    processes = 1 + workers + spares + (1 if gpu else 0)
    if forkserver.enabled(device):  # the servers the workers are forked from hold torch's memory too
        processes += forkserver.ROLES
    terms = {"processes": processes * (PROCESS_GPU if gpu else PROCESS_CPU)}
    if gpu and transport == "ipc":
        # data lives on the GPU (the judge compares there, and two runs' outputs are compared there too);
        # a model is built on the host before it moves
        terms["a model built on the host"] = W
        return terms
    held = sets * (I + O + H) if resident else (I + O + H)
    # the judge: the sets it keeps, and while comparing one output on the CPU, seven float64 temporaries
    terms["judge"] = W * 3 + held + max(2 * A + 3 * I, 7 * T)
    # a worker: its model, trial 0 and its repeat (inputs and outputs), and the files written for the judge
    terms["workers"] = workers * (W + 3 * I + 4 * O)
    return terms


def _gpu_terms(s: ProblemSizes, sets: int, workers: int, spares: int, resident: bool) -> dict[str, int]:
    """While candidates are evaluated. The judge's scratch is bounded: it compares in one pass, or a
    chunk at a time (JUDGE_SCRATCH), plus a copy of a non-contiguous output and the input-change check.
    Before, while it computes the sets (a forward in float32 and one in float64, 2A + 3I), the workers
    hold only their contexts and the baselines (2A + I) have not started, and it gives the forwards'
    memory back before the candidates start: that peak is below this one."""
    I, O, H, W, A = s.input_bytes, s.output_bytes, s.held_truth_bytes, s.param_bytes, s.forward_bytes
    held = sets * (I + O + H) if resident else (I + O + H)
    return {
        "contexts": (2 + workers + spares) * CUDA_CONTEXT_GPU,
        "judge": 3 * W + held + JUDGE_SCRATCH + O + I + (0 if resident else 2 * A + 3 * I),
        "baselines": W + I + 2 * A + FLUSH_BUFFER,
        "workers": workers * (W + 3 * I + 2 * O + A + FLUSH_BUFFER),
    }


def plan(sizes: ProblemSizes, device: str, sets: int, host_available: int, host_source: str,
         gpu_free: int | None = None, workers: int | None = None, transport: str | None = None) -> MemoryPlan:
    """The largest plan that fits (most workers, expected outputs resident where possible), or a
    ProblemError that says what is needed, what is available and what to change."""
    gpu = device.startswith("cuda")
    transport = transport or ("ipc" if gpu else "file")
    cores = os.cpu_count() or 2
    most = workers if workers is not None else (max(1, min(MAX_GPU_WORKERS, cores // 2)) if gpu else 1)
    small = sets * (sizes.input_bytes + sizes.output_bytes + sizes.held_truth_bytes) <= SMALL_RESIDENT
    choices = [True, False] if gpu or small else [False]
    last = None
    # the expected outputs kept, with fewer workers, before more workers that recompute them: a judge that
    # recomputes runs two forwards (one in float64) per output it compares, and serves the workers one by one
    for resident in choices:
        for n in range(most, 0, -1):
            spares = n if gpu else 1
            candidate = MemoryPlan(device, sizes, sets, n, spares, resident, transport,
                                   _host_terms(sizes, device, sets, n, spares, resident, transport),
                                   _gpu_terms(sizes, sets, n, spares, resident) if gpu else {})
            last = candidate
            fits_host = candidate.host_bytes <= HOST_SHARE * host_available
            fits_gpu = not gpu or gpu_free is None or candidate.gpu_bytes <= GPU_SHARE * gpu_free
            if fits_host and fits_gpu:
                return candidate
    assert last is not None
    needs = [f"{last.host_bytes / GB:.1f} GB of host memory ({host_available / GB:.1f} GB available, "
             f"from {host_source})"]
    if gpu and gpu_free is not None:
        needs.append(f"{last.gpu_bytes / GB:.1f} GB of GPU memory ({gpu_free / GB:.1f} GB free)")
    raise ProblemError(
        f"the problem is too large for this machine: one worker needs {' and '.join(needs)}; one input set "
        f"holds {sizes.describe()}. Shrink it with --set (e.g. a smaller batch size), store fewer input sets "
        f"with --trials, or give another figure with --memory-limit")


def is_too_large(exc: BaseException) -> bool:
    return isinstance(exc, ProblemError) and str(exc).startswith("the problem is too large")
