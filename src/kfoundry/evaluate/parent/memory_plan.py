"""How much memory an evaluator needs, predicted before anything runs, and how many workers fit.

The problem is built on the meta device (nothing allocated, nothing computed) at the given --set
values: that gives the bytes of one set's inputs (I), outputs (O), outputs in float64 (T, the truth;
T' as the judge keeps it, float32 corrections of float outputs), parameters (W) and the live peak of
one forward (A). The prediction is a sum of named terms over the processes an evaluator starts (the
judge, the baseline process on a GPU, the candidate workers and their spares), each a fixed overhead
plus a multiple of those bytes; docs/judging.md states it. It never grows with the number of trials,
except where the expected outputs of all S sets are kept (on the GPU, or on the CPU when they are
tiny).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from kfoundry.errors import ProblemError
from kfoundry.evaluate.parent import forkserver
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
    held_truth_bytes: int  # T': the truth as the judge keeps it (float32 corrections: evaluate.reference.truth)
    param_bytes: int  # W: parameters and buffers
    forward_bytes: int  # A: the live peak of one forward (outputs included)
    truth_forward_bytes: int = 0  # A64: the live peak of the float64 forward (0: not measured, taken as 2A)

    @property
    def truth_forward(self) -> int:
        return self.truth_forward_bytes or 2 * self.forward_bytes

    def describe(self) -> str:
        return (f"inputs {self.input_bytes / GB:.2f} GB, outputs {self.output_bytes / GB:.2f} GB, "
                f"float64 truth {self.truth_bytes / GB:.2f} GB (kept as {self.held_truth_bytes / GB:.2f} GB), "
                f"parameters {self.param_bytes / GB:.2f} GB, "
                f"one forward's peak {self.forward_bytes / GB:.2f} GB "
                f"({self.truth_forward / GB:.2f} GB in float64)")


def _leaves(value: Any) -> list:
    """The tensors of a nested value."""
    import torch

    from kfoundry.evaluate.reference.compare import flatten_outputs

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
    """The sizes of one set, from the problem built and run on the meta device (in the precision, and in
    float64 for the truth's forward); a problem whose forward cannot run on meta (data-dependent shapes)
    is sized by its inputs and parameters, its outputs taken as large as its inputs."""
    from kfoundry import problem as problems

    with problems.on_host("meta"):  # this runs in the main process, which never touches the GPU
        return _sizes(problems.load_problem_module(source), precision, eval_mode)


def _sizes(module, precision: str, eval_mode: bool) -> ProblemSizes:
    import torch

    from kfoundry import problem as problems
    from kfoundry.evaluate.reference import truth as truths

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
    try:
        _, peak64 = _peak_of(model.to(torch.float64), problems.cast_floats(inputs, torch.float64))
    except Exception:  # the truth's own forward fails too, or differs: twice the precision's is the estimate
        peak64 = 0
    return ProblemSizes(input_bytes, output_bytes, truth, held, params, max(peak, output_bytes),
                        max(peak64, truth) if peak64 else 0)


TIER_WORDS = {  # the tiers, and how a plan names them
    "resident": "every set's expected outputs kept on the device",
    "host": "every set's expected outputs kept in host memory, one set at a time on the GPU",
    "per_set": "one set at a time, computed again when it is needed",
}
TRUTH_WORDS = {  # where the truth is made, and how a plan names it
    "device": "float64 truth on the device",
    "host": "float64 truth computed on the host",
    "none": "no float64 truth (it does not fit)",
}
# the plans tried in turn, best first: where the expected outputs are kept, and where the truth is computed.
# One set at a time before the host: on the H200 a 6.4 GB softmax's set-up took 78 s in the host tier (every
# set's outputs and truth copied out) and 7 s in the one-set tier, whose sets are computed again in
# milliseconds; the host tier serves where the GPU cannot also hold a set being computed
# (benchmarks/results/memory_tiers-h200-20261204b-host-tier.json,
# benchmarks/results/archive/memory_tiers-h200-20261204a.json)
GPU_ORDER = (("resident", "device"), ("per_set", "device"), ("host", "device"), ("per_set", "host"),
             ("per_set", "none"))


@dataclass
class MemoryPlan:
    """A prediction of peak memory (host and, on a GPU, device) for an evaluator of one problem.

    On a GPU the device's peak is the largest of its phases: `prepare` (the judge computes the sets; the
    other processes hold their contexts), `baselines` (only where they run before the candidates) and
    `serving` (the judge serves the candidates' workers, with the baseline process beside them unless it
    ran first)."""

    device: str
    sizes: ProblemSizes
    sets: int  # S: input sets (trials + the guard's two)
    workers: int  # candidates evaluated at once
    spares: int  # workers started ahead
    tier: str  # TIER_WORDS' keys: where the expected outputs are kept
    transport: str  # "ipc" or "file"
    truth: str = "device"  # TRUTH_WORDS' keys: where the float64 truth is computed
    baselines_first: bool = False  # the baselines are timed before any candidate runs (GPU)
    host_terms: dict[str, int] = field(default_factory=dict)
    gpu_phases: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def resident(self) -> bool:
        return self.tier == "resident"

    @property
    def host_bytes(self) -> int:
        return sum(self.host_terms.values())

    @property
    def largest_phase(self) -> str | None:
        """The GPU phase that needs the most memory (None off the GPU)."""
        if not self.gpu_phases:
            return None
        return max(self.gpu_phases, key=lambda name: sum(self.gpu_phases[name].values()))

    @property
    def gpu_terms(self) -> dict[str, int]:
        """The terms of the GPU's largest phase."""
        return self.gpu_phases[self.largest_phase] if self.gpu_phases else {}

    @property
    def gpu_bytes(self) -> int:
        return sum(self.gpu_terms.values())

    def describe(self) -> str:
        text = (f"{self.workers} worker(s) + {self.spares} spare(s); {TIER_WORDS[self.tier]}"
                f"; {TRUTH_WORDS[self.truth]}"
                f"{'; baselines timed before the candidates' if self.baselines_first else ''}; "
                f"host {self.host_bytes / GB:.1f} GB")
        if self.gpu_phases:
            text += f", GPU {self.gpu_bytes / GB:.1f} GB"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"workers": self.workers, "spares": self.spares, "tier": self.tier, "truth": self.truth,
                "baselines_first": self.baselines_first, "resident": self.resident,
                "transport": self.transport, "sets": self.sets, "host_bytes": self.host_bytes,
                "gpu_bytes": self.gpu_bytes, "host_terms": dict(self.host_terms),
                "gpu_phases": {k: dict(v) for k, v in self.gpu_phases.items()}, "sizes": vars(self.sizes)}


def _kept(s: ProblemSizes, sets: int, tier: str, truth: str) -> int:
    """What the judge holds of the sets on its device: all of them, or the one in use."""
    H = s.held_truth_bytes if truth != "none" else 0
    one = s.input_bytes + s.output_bytes + H
    return sets * one if tier == "resident" else one


def _computing(s: ProblemSizes, truth: str) -> int:
    """The judge's scratch while it computes one set on its device: the inputs' clone the reference runs
    on and its forward; then, with the truth on the device, the inputs in float64 and the float64 forward
    (the two one after the other)."""
    I, A, A64 = s.input_bytes, s.forward_bytes, s.truth_forward
    forward = I + A
    return max(forward, 2 * I + A64) if truth == "device" else forward


def _host_terms(s: ProblemSizes, device: str, sets: int, workers: int, spares: int, tier: str,
                transport: str, truth: str = "device") -> dict[str, int]:
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
        if tier == "host":
            terms["expected outputs kept on the host"] = sets * (O + H)
        if truth == "host":  # the float64 model, one set's inputs and reference, its float64 forward, the result
            terms["the float64 truth on the host"] = 2 * W + 3 * I + O + s.truth_forward + H
        return terms
    held = sets * (I + O + H) if tier == "resident" else (I + O + H)
    # the judge: the sets it keeps, and while comparing one output on the CPU, seven float64 temporaries
    terms["judge"] = W * 3 + held + max(2 * A + 3 * I, 7 * T)
    # a worker: its model, trial 0 and its repeat (inputs and outputs), and the files written for the judge
    terms["workers"] = workers * (W + 3 * I + 4 * O)
    return terms


def _gpu_phases(s: ProblemSizes, sets: int, workers: int, spares: int, tier: str, truth: str,
                baselines_first: bool) -> dict[str, dict[str, int]]:
    """GPU memory by phase. The judge's comparisons are bounded: one pass, or a chunk at a time
    (JUDGE_SCRATCH), plus a copy of a non-contiguous output and the input-change check. It gives the
    memory of every forward back once the forward is done (a set computed, or its truth)."""
    I, O, W, A = s.input_bytes, s.output_bytes, s.param_bytes, s.forward_bytes
    contexts = {"contexts": (2 + workers + spares) * CUDA_CONTEXT_GPU}
    models = W + (2 * W if truth == "device" else 0)  # the model, and its float64 copy
    kept = _kept(s, sets, tier, truth)
    scratch = JUDGE_SCRATCH + O + I
    # a set computed while the candidates run: the one-set tier computes them again, the host tier only draws
    # the inputs again (they are part of the set it holds)
    serving_compute = _computing(s, truth) if tier == "per_set" else 0
    judge_serving = models + kept + scratch + serving_compute
    baselines = W + I + 2 * A + FLUSH_BUFFER
    phases = {
        # every set computed once, its truth too (checks on all of them); the other tiers keep set 0 (the probe
        # is compared with it) and the set being checked
        "prepare": {**contexts, "judge": models + (kept if tier == "resident" else 2 * kept) + _computing(s, truth)},
        "serving": {**contexts, "judge": judge_serving,
                    **({} if baselines_first else {"baselines": baselines}),
                    "workers": workers * (W + 3 * I + 2 * O + A + FLUSH_BUFFER)},
    }
    if baselines_first:
        phases["baselines"] = {**contexts, "judge": models + kept + scratch, "baselines": baselines}
    return phases


def plan(sizes: ProblemSizes, device: str, sets: int, host_available: int, host_source: str,
         gpu_free: int | None = None, workers: int | None = None, transport: str | None = None,
         tier: str | None = None, truth: str | None = None, first: bool | None = None) -> MemoryPlan:
    """The best plan that fits, or a ProblemError that says what is needed, what is available and what
    to change. Best: on a GPU the first of GPU_ORDER that fits (the expected outputs kept where they are
    quickest to reach, the truth on the device), then the most workers, then the baselines beside the
    candidates rather than before them. `tier`, `truth` and `first` (the baselines first) force those
    choices (--memory-tier; a plan refitted once the judge holds its sets); `gpu_free` None plans the host
    alone (the GPU's figure comes from the judge, kfoundry.evaluate.parent.judge)."""
    gpu = device.startswith("cuda")
    transport = transport or ("ipc" if gpu else "file")
    cores = os.cpu_count() or 2
    most = workers if workers is not None else (max(1, min(MAX_GPU_WORKERS, cores // 2)) if gpu else 1)
    if gpu:
        order = [(t, place) for t, place in GPU_ORDER if tier in (None, t) and truth in (None, place)]
    else:
        if tier == "host":
            raise ProblemError("--memory-tier host keeps the expected outputs in host memory while the judge works "
                               "on a GPU: on the CPU use resident or per-set")
        small = sets * (sizes.input_bytes + sizes.output_bytes + sizes.held_truth_bytes) <= SMALL_RESIDENT
        # unforced, the CPU keeps every set only when they are small: a set computed again costs little there
        # next to a comparison in float64, and the memory goes to the workers; the truth is made where it computes
        order = [(tier, "device")] if tier else [(t, "device") for t in (("resident", "per_set") if small
                                                                          else ("per_set",))]
    tried: list[MemoryPlan] = []
    for chosen_tier, place in order:
        for n in range(most, 0, -1):
            for before in ((False, True) if gpu else (False,)):
                if first is not None and before != first:
                    continue
                spares = n if gpu else 1
                candidate = MemoryPlan(
                    device, sizes, sets, n, spares, chosen_tier, transport, place, before,
                    _host_terms(sizes, device, sets, n, spares, chosen_tier, transport, place),
                    _gpu_phases(sizes, sets, n, spares, chosen_tier, place, before) if gpu else {})
                tried.append(candidate)
                fits_host = candidate.host_bytes <= HOST_SHARE * host_available
                fits_gpu = not gpu or gpu_free is None or candidate.gpu_bytes <= GPU_SHARE * gpu_free
                if fits_host and fits_gpu:
                    return candidate
    raise ProblemError(_refusal(tried, sizes, host_available, host_source, gpu_free))


def _refusal(tried: list[MemoryPlan], sizes: ProblemSizes, host_available: int, host_source: str,
             gpu_free: int | None) -> str:
    """The message of a problem too large: the smallest plan, which tier it was and what did not fit."""
    smallest = tried[-1]
    gpu = smallest.device.startswith("cuda")
    needs = []
    if smallest.host_bytes > HOST_SHARE * host_available or not gpu:
        needs.append(f"{smallest.host_bytes / GB:.1f} GB of host memory ({host_available / GB:.1f} GB available, "
                     f"from {host_source})")
    if gpu and gpu_free is not None and smallest.gpu_bytes > GPU_SHARE * gpu_free:
        terms = ", ".join(f"{name} {value / GB:.1f}" for name, value in smallest.gpu_terms.items())
        needs.append(f"{smallest.gpu_bytes / GB:.1f} GB of GPU memory while {smallest.largest_phase} "
                     f"({terms} GB; {gpu_free / GB:.1f} GB free, {GPU_SHARE:.0%} of it usable)")
    return (f"the problem is too large for this machine: even the smallest plan ({TIER_WORDS[smallest.tier]}, "
            f"{TRUTH_WORDS[smallest.truth]}, one worker"
            f"{', baselines first' if smallest.baselines_first else ''}) needs {' and '.join(needs)}; one input set "
            f"holds {sizes.describe()}. Shrink it with --set (e.g. a smaller batch size), store fewer input sets "
            f"with --trials, or give another figure with --memory-limit")


def is_too_large(exc: BaseException) -> bool:
    return isinstance(exc, ProblemError) and str(exc).startswith("the problem is too large")
