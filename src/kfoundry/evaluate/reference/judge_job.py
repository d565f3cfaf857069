"""The judge: the reference side of an evaluation, a long-lived process that never imports a candidate.

It computes, for every input set (the trials, and the guard's probe and outlier sets), the inputs
and the expected outputs (the PyTorch reference and its float64 ground truth), checks whether the
problem is weak, and measures its cost and the device's facts. Then it serves the parent's orders
several at once: put a set's inputs where a candidate's worker can take them, and compare what a
worker computed with what is expected (one comparison at a time). The expected outputs never leave
this process.

Where the sets are kept is the memory plan's tier (kfoundry.evaluate.reference.expected): all of them on the
judge's device where they fit, so comparisons run there in milliseconds; else their expected outputs
in host memory; else one set at a time, computed again when it is needed, its float64 truth made only
when a comparison needs it. On a GPU the parent chooses the tier once this process has made its
context and measured the memory free (a `plan` request).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from kfoundry import problem as problems
from kfoundry.diagnose.numeric import error_pattern, nondeterminism
from kfoundry.errors import ProblemError
from kfoundry.evaluate.reference import truth as truths
from kfoundry.evaluate.reference.compare import compare_outputs, flatten_outputs
from kfoundry.evaluate.reference.expected import ExpectedSet, Reference, detached, inputs_changed
from kfoundry.evaluate.reference.reference_job import (INPUT_INDEPENDENT, NEAR_ZERO_PREFIX, NONDETERMINISTIC, all_close,
                                                       clone_inputs, near_zero, plain, synchronize)
from kfoundry.evaluate.shared import transport
from kfoundry.evaluate.shared.device_facts import device_facts
from kfoundry.evaluate.timing.compiling import compile_off_gpu
from kfoundry.evaluate.timing.gpu_lock import ThreadLocks
from kfoundry.evaluate.timing.gpu_timer import spent
from kfoundry.types import to_jsonable


GARBAGE_SAMPLE = 1 << 24  # elements of each run the typical magnitude is taken from
GARBAGE_CHUNK = 1 << 25


def _garbage_only(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether every element that differs between the two runs holds, in one run or the other, what
    unwritten memory holds (NaN poison, Inf, denormals, absurd magnitudes) rather than a value.
    A chunk at a time, and the typical magnitude from a strided sample: outputs can be GBs."""
    if not a.is_floating_point():
        return False
    a, b = a.reshape(-1), b.reshape(-1)
    step = max(1, a.numel() // GARBAGE_SAMPLE)
    sample = torch.cat([a[::step].double(), b[::step].double()])
    finite = sample[torch.isfinite(sample)]
    scale = float(finite.abs().median()) if finite.numel() else 1.0
    del sample, finite

    def garbage(x: torch.Tensor) -> torch.Tensor:
        size = x.abs()
        return ~torch.isfinite(x) | (size > 1e6 * (scale + 1.0)) | ((size < 1e-30) & (size > 0))

    for begin in range(0, a.numel(), GARBAGE_CHUNK):
        x, y = a[begin:begin + GARBAGE_CHUNK].double(), b[begin:begin + GARBAGE_CHUNK].double()
        differ = (x != y) & ~(torch.isnan(x) & torch.isnan(y))
        if not bool((garbage(x) | garbage(y))[differ].all()):
            return False
    return True


def _layout(inputs: list) -> Any:
    """A set's tensor layouts as the `inputs` order describes them; None where they cannot be carried."""
    try:
        return transport.describe_tree(inputs, transport.tensor_meta)
    except transport.TransportError:
        return None


def _check_redrawn(ref: Reference, first: ExpectedSet) -> None:
    """Outside the resident tier a set's inputs are drawn again from its seed whenever it is needed: they
    must come out the same."""
    again = ref.make_inputs("0")
    if not all_close(again, first.inputs, 0.0):
        raise ProblemError("get_inputs() does not give the same inputs again for the same seed (it draws from a "
                           "source kfoundry does not seed?), and at these sizes the judge keeps one input set at a "
                           "time and draws them again when needed: draw with torch's random functions, or shrink "
                           "the problem with --set so that every set is kept")


def convs_run_tf32(device: str) -> bool:
    """Whether cuDNN's fp32 convolutions run TF32 here, as the problem left PyTorch's settings."""
    if not device.startswith("cuda") or torch.cuda.get_device_capability(device)[0] < 8:
        return False
    precision = getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", None)
    return precision == "tf32" if precision in ("tf32", "ieee") else bool(torch.backends.cudnn.allow_tf32)


def _reference_error(ref: Reference, first: ExpectedSet) -> float | None:
    """The reference's own error ratio against the float64 truth on the first set (the largest over its outputs),
    as a verdict computes e(reference); None without a truth. The composer reads it: on a GPU whose convolutions run
    TF32 it is of order ten, and a TF32 main loop after a norm then passes max(1, 2 e(reference)) too."""
    if first.truth is None:
        return None
    tol = ref.job["tolerance"]
    try:
        comparison = compare_outputs(first.reference, first.reference, first.truth, tol, tol, first.index_sources,
                                     device=ref.device if ref.device.startswith("cuda") else None)
    except Exception:  # noqa: BLE001 -- a hint for the composer, never a reason to stop (out of memory on GBs)
        if ref.device.startswith("cuda"):
            torch.cuda.empty_cache()
        return None
    ratios = [o.error_ratio_reference for o in comparison.outputs if o.error_ratio_reference is not None]
    return max(ratios) if ratios else None


def prepare(ref: Reference, channel) -> dict[str, Any]:
    """Every set once (kept as the tier says), the weak-problem checks, the cost and the device's facts."""
    job, device = ref.job, ref.device
    tol = job["tolerance"]
    warnings: list[str] = []
    started = time.monotonic()
    channel.phase("inputs")
    channel.phase("expected")
    first = ref.compute("0")  # with its truth, in every tier: whether the truth can be made is known now
    if not any(isinstance(x, torch.Tensor) for x in flatten_outputs(first.reference)):
        # nothing to compare: every candidate would pass, or be judged a ghost
        found = "None" if first.reference is None else type(first.reference).__name__
        raise ProblemError(f"the problem's forward returns no tensor ({found}): a kernel is judged by the tensors "
                           "its forward returns, so Model.forward must return at least one")
    if not ref.resident:
        _check_redrawn(ref, first)
    # the same inputs once more, the RNG not reset in between: random ops (Dropout) show as a difference
    with torch.no_grad():
        again = detached(ref.model(*clone_inputs(first.inputs)), ref.owned)
    synchronize(device)
    if not all_close(first.reference, again, tol):
        warnings.append(NONDETERMINISTIC)
        ref.truth_status = "unavailable: the reference is random (two identical runs differ)"
        ref.model64 = None
        first.truth = None
    del again
    own_error = _reference_error(ref, first)  # after the check above: a random reference has no truth
    output_meta = [{"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}
                   for x in flatten_outputs(first.reference) if isinstance(x, torch.Tensor)]
    near, independent = near_zero(first.reference, tol), False
    cost = problems.measure_cost(ref.model, clone_inputs(first.inputs), first.reference)
    ref.keep(first)
    layouts = {"0": _layout(first.inputs)}
    for name in ref.names[1:]:
        # the one-set tier makes a truth when a comparison asks for it; the others keep it from now
        expected = ref.compute(name, with_truth=ref.tier != "per_set")
        layouts[name] = _layout(expected.inputs)
        near = near and near_zero(expected.reference, tol)
        if name == "probe":  # fresh data: the same output means it does not depend on its inputs
            independent = (all_close(expected.reference, first.reference, tol)
                           and not all_close(expected.inputs, first.inputs, 0.0))
        ref.keep(expected)
        del expected
    if not ref.resident:
        ref.sets = {}
    del first
    if near:
        warnings.append(f"{NEAR_ZERO_PREFIX} ({tol:g}) of zero, so a kernel that writes zeros passes")
    if independent:
        warnings.append(INPUT_INDEPENDENT)
    sets_seconds = time.monotonic() - started
    cache_dir = Path(job["cache_dir"]) if job.get("cache_dir") else None
    facts = device_facts(device, cache_dir, measure=job.get("measure_device", True))
    folder = Path(job["exchange_dir"])
    torch.save(ref.init_inputs, folder / "init_inputs.pt")
    result: dict[str, Any] = {
        "warnings": warnings,
        "weak": {"random": NONDETERMINISTIC in warnings, "near_zero": near, "input_independent": independent},
        "truth": ref.truth_status,
        "output_meta": output_meta,
        "cost": to_jsonable(cost),
        "device_facts": to_jsonable(facts),
        "tier": ref.tier,
        "sets_seconds": round(sets_seconds, 3),
        # TF32 convolutions make the reference TF32-level only where it runs a convolution (a GEMM's stays fp32)
        "reference_rounding": {"error_ratio": own_error,
                               "conv_tf32": convs_run_tf32(device) and cost.conv_flops != 0},
        # each set's tensor layouts: a worker allocates its buffers from these, with no order to ask for them
        "input_layouts": layouts,
    }
    if device.startswith("cuda"):
        synchronize(device)
        # the forwards' temporaries go back to the device: from now on the candidates' workers need it
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(device)
        result["gpu_memory"] = {"free": free, "total": total, "judge_allocated": torch.cuda.memory_allocated(device),
                                "judge_peak": torch.cuda.max_memory_allocated(device)}
    return result


# -- orders ----------------------------------------------------------------------------------------

def _open(tree: Any, folder: Path, device: str) -> Any:
    """A worker's value (outputs or inputs after a run) from its descriptor."""
    if isinstance(tree, dict) and "file" in tree:
        return transport.load_file(folder, tree["file"])
    return transport.build_tree(tree, lambda desc: transport.open_shared(desc, device))


def _inputs(ref: Reference, order: dict[str, Any]) -> dict[str, Any]:
    expected = ref.get(order["set"])
    folder = Path(order["folder"])
    if order.get("mode") == "file":
        name = f"inputs_{order['set']}.pt"
        torch.save(plain(expected.inputs), folder / name)
        return {"file": name}
    return {"tree": transport.describe_tree(expected.inputs, transport.tensor_meta)}


def _fill(ref: Reference, order: dict[str, Any]) -> dict[str, Any]:
    expected = ref.get(order["set"])
    buffers = transport.build_tree(order["buffers"], lambda desc: transport.open_shared(desc, ref.device))
    leaves = flatten_outputs(buffers)
    sources = flatten_outputs(expected.inputs)
    if len(leaves) != len(sources):
        raise transport.TransportError("the buffers do not match the inputs")
    for dst, src in zip(leaves, sources):
        if isinstance(src, torch.Tensor):
            if not isinstance(dst, torch.Tensor) or dst.shape != src.shape or dst.dtype != src.dtype:
                raise transport.TransportError("a buffer does not match its input's shape and dtype")
            dst.copy_(src)
    synchronize(ref.device)
    return {"ok": True}


def _compare(ref: Reference, order: dict[str, Any]) -> dict[str, Any]:
    """A worker's outputs on one set against the expected ones: the figures, never the expected values.
    Where its serving went comes back in `serve_parts`."""
    expected = ref.get(order["set"])
    folder = Path(order["folder"])
    atol = ref.job["tolerance"]
    parts: dict[str, float] = {}
    reply: dict[str, Any] = {"serve_parts": parts}
    with spent(parts, "open"):
        data = _open(order["outputs"], folder, ref.device)
    if order.get("inputs") is not None:
        with spent(parts, "inputs"):
            after = _open(order["inputs"], folder, ref.device)
            changed = inputs_changed(expected.inputs, list(after) if isinstance(after, (list, tuple)) else [after])
            if changed is not None and expected.inputs_after is not None:
                changed = None if inputs_changed(expected.inputs_after, list(after)) is None else changed
            reply["changed_input"] = changed
            del after
    on = ref.device if ref.device.startswith("cuda") else None
    with spent(parts, "compare"):
        comparison = compare_outputs(data, expected.reference, expected.truth, atol, atol, expected.index_sources,
                                     device=on)
    if not comparison.passed and expected.truth is None and _values_differ(comparison):
        # not allclose to the reference: the float64 truth arbitrates, made now where it is made on demand
        with spent(parts, "truth"):
            truth = ref.truth_for(expected)
        if truth is not None:
            with spent(parts, "compare"):
                comparison = compare_outputs(data, expected.reference, truth, atol, atol, expected.index_sources,
                                             device=on)
    reply.update(passed=comparison.passed, message=comparison.message, failed_output=comparison.failed_output,
                 outputs=[to_jsonable(o) for o in comparison.outputs])
    if not comparison.passed and order.get("pattern") and comparison.failed_output is not None:
        with spent(parts, "pattern"):
            reply["error_pattern"] = _pattern(data, expected, comparison.failed_output, atol, order["set"])
    if order.get("repeat") is not None:
        with spent(parts, "repeat"):
            again = _open(order["repeat"], folder, ref.device)
            reply["repeat"] = _repeat(data, again, atol)
            del again
    then = order.get("fill")
    if then is not None:  # the worker's next inputs, filled in this order's hold: one wait for the GPU less
        del data
        with spent(parts, "fill"):
            try:
                _fill(ref, then)
                reply["filled"] = True
            except transport.TransportError as exc:
                reply["fill_error"] = str(exc)
    return reply


def _values_differ(comparison) -> bool:
    """Whether the failed output was a float tensor compared value by value (not a shape, dtype or count)."""
    index = comparison.failed_output
    return index is not None and index < len(comparison.outputs) and \
        comparison.outputs[index].max_abs_error is not None and comparison.outputs[index].error_ratio_candidate is None


def _pattern(data: Any, expected: ExpectedSet, index: int, atol: float, name: str) -> dict[str, Any] | None:
    """What the wrong output looks like (kfoundry.diagnose.numeric), for the diagnosis."""
    candidate, reference = flatten_outputs(data), flatten_outputs(expected.reference)
    truth = flatten_outputs(expected.truth) if expected.truth is not None else None
    if index >= min(len(candidate), len(reference)):
        return None
    c, r = candidate[index], reference[index]
    t = truth[index] if truth is not None and len(truth) == len(reference) else None
    if not (isinstance(c, torch.Tensor) and isinstance(r, torch.Tensor)):
        return None
    where = None
    if c.shape == r.shape and c.numel() > PATTERN_ELEMENTS:
        c, r, t, where = _leading_block(c, r, t)
    t = truths.as_float64(t, r)
    try:
        pattern = error_pattern(c.to(r.device), r, atol, atol, t if isinstance(t, torch.Tensor) else None)
    except Exception as exc:  # evidence for the diagnosis, never a reason to lose the verdict
        return {"error": f"{type(exc).__name__}: {exc}"}
    pattern["output"], pattern["input_set"] = index, name
    if where:
        pattern["block"] = where
    return to_jsonable(pattern)


# the pattern's analysis holds several float64 copies of an output in host memory: an 8.6 GB output took
# the judge past 110 GB on the H200; larger outputs are read through a leading block of this many elements
PATTERN_ELEMENTS = 1 << 26


def _leading_block(c: torch.Tensor, r: torch.Tensor, t: Any) -> tuple[torch.Tensor, torch.Tensor, Any, str]:
    """The same leading block of the three (whole rows of the first dims, as many as PATTERN_ELEMENTS
    allow), and its description."""
    index: list = []
    shape = list(c.shape)
    for dim, size in enumerate(shape):
        inner = math.prod(shape[dim + 1:])
        index.append(slice(0, max(1, min(size, PATTERN_ELEMENTS // max(inner, 1)))))
        if inner <= PATTERN_ELEMENTS:
            break  # else one index of this dim is still too large: its first, and one dim deeper
    block = tuple(index)
    if isinstance(t, truths.Correction):
        t = truths.Correction(t.correction[block])
    elif isinstance(t, torch.Tensor):
        t = t[block]
    described = ", ".join(f"{s.stop} of {size}" for s, size in zip(index, shape))
    return c[block], r[block], t, f"the leading block [{described}] of the output (it holds {c.numel()} elements)"


def _repeat(first: Any, second: Any, atol: float) -> dict[str, Any] | None:
    """Trial 0 ran twice with the same inputs and seed: different results mean a race."""
    for index, (a, b) in enumerate(zip(flatten_outputs(first), flatten_outputs(second))):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
            b = b.to(a.device)
            found = nondeterminism(a, b)
            if found:
                found["output"] = index
                found["tolerance"] = atol
                found["garbage_only"] = _garbage_only(a, b)
                return to_jsonable(found)
    return None


ORDERS = {"inputs": _inputs, "fill": _fill, "compare": _compare}


def _needs_gpu(ref: Reference, order: dict[str, Any]) -> bool:
    """False for an order that only describes inputs already computed (CUDA IPC: the worker's buffers are
    filled by the next order): it need not wait while a timing holds the GPU."""
    return not (order.get("op") == "inputs" and order.get("mode") != "file" and order.get("set") in ref.sets)


SERVING_THREADS = 4  # orders served at once where every set is resident


def _heavy(order: dict[str, Any]) -> bool:
    """An order whose scratch memory the plan counts once (a comparison, inputs written to a file): these
    are served one at a time; fills and layouts allocate nothing and may run beside them."""
    return order.get("op") == "compare" or (order.get("op") == "inputs" and order.get("mode") == "file")


def serve(ref: Reference, order: dict[str, Any], locks: ThreadLocks, heavy: threading.Lock, channel) -> None:
    """One order, answered on the channel (with where its time went: waiting for the GPU, serving)."""
    handler = ORDERS.get(order.get("op"))
    answer: dict[str, Any]
    asked = time.monotonic()
    served = asked
    try:
        if handler is None:
            raise transport.TransportError(f"unknown order {order.get('op')!r}")
        # the heavy lock before the GPU's: a thread that holds the GPU never waits for another of ours,
        # so a timing waiting for the GPU cannot wait on a thread that waits for it
        with heavy if _heavy(order) else contextlib.nullcontext():
            with locks.shared(order["op"]) if _needs_gpu(ref, order) else contextlib.nullcontext():
                served = time.monotonic()
                answer = handler(ref, order)
    except transport.TransportError as exc:
        answer = {"error": str(exc), "transport": True}
    except Exception as exc:  # one bad order never ends the judge
        answer = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
    answer["lock_wait_s"], answer["serve_s"] = round(served - asked, 4), round(time.monotonic() - served, 4)
    channel.send(answer=order.get("id"), **answer)


def _plan(ref: Reference, job: dict[str, Any], channel) -> tuple[str, str]:
    """Where the sets are kept and the truth is made. On a GPU the parent plans it from the memory free
    once this process holds its context and the model (the parent itself never touches the GPU); on the
    CPU the job says."""
    if not ref.device.startswith("cuda"):
        return job["tier"], job["truth"]
    synchronize(ref.device)
    free, total = torch.cuda.mem_get_info(ref.device)
    reply = channel.request("plan", gpu_free=free, gpu_total=total,
                            judge_allocated=torch.cuda.memory_allocated(ref.device))
    if reply.get("refuse"):
        raise ProblemError(reply["refuse"])
    return reply["tier"], reply["truth"]


def run_judge(job: dict[str, Any], channel) -> dict[str, Any]:
    locks = ThreadLocks("judge")
    compile_off_gpu(locks)  # its comparison kernel compiles on the first compare
    channel.phase("load")
    started = time.monotonic()
    try:
        with locks.shared("reference"):
            ref = Reference(job, channel)
        ref.set_plan(*_plan(ref, job, channel))  # not under the lock: it waits for the parent
        with locks.shared("reference"):
            prepared = prepare(ref, channel)
    except ProblemError as exc:
        return {"problem_error": str(exc)}
    except Exception as exc:
        return {"problem_error": f"the problem's Model raised {type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()}
    prepared["seconds"] = round(time.monotonic() - started, 3)
    channel.send(prepared=prepared)
    channel.phase("serving")
    # Several candidates' orders at once: one order waiting for the GPU (a timing holds it) or serving
    # does not hold back the others. Sets computed on demand (not resident) are made one at a time.
    threads = SERVING_THREADS if ref.resident else 1
    heavy = threading.Lock()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kfoundry-judge") as pool:
        while True:
            order = channel.receive()
            if order is None or order.get("op") == "close":
                return {"status": "closed"}
            pool.submit(serve, ref, order, locks, heavy, channel)
