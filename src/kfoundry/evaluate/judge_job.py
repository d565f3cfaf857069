"""The judge: the reference side of an evaluation, a long-lived process that never imports a candidate.

It computes, for every input set (the trials, and the guard's probe and outlier sets), the inputs
and the expected outputs (the PyTorch reference and its float64 ground truth), checks whether the
problem is weak, and measures its cost and the device's facts. Then it serves the parent's orders
several at once: put a set's inputs where a candidate's worker can take them, and compare what a
worker computed with what is expected (one comparison at a time). The expected outputs never leave
this process.

Where they fit (`resident`), every set's expected outputs stay in memory — on the GPU for a GPU
problem, so comparisons run there in milliseconds; otherwise a set is computed again when it is
needed and only the last one is kept, so memory does not grow with the number of trials.
"""

from __future__ import annotations

import contextlib
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
from kfoundry.evaluate import transport, truth as truths
from kfoundry.evaluate.compare import IndexSource, compare_outputs, flatten_outputs
from kfoundry.evaluate.compiling import compile_off_gpu
from kfoundry.evaluate.device_facts import device_facts
from kfoundry.evaluate.gpu_lock import ThreadLocks
from kfoundry.evaluate.index_sources import IndexRecorder
from kfoundry.evaluate.reference_job import (INPUT_INDEPENDENT, NEAR_ZERO_PREFIX, NONDETERMINISTIC, all_close,
                                             clone_inputs, draw_inputs, near_zero, plain, synchronize, upcast,
                                             with_outliers)
from kfoundry.evaluate.timing import spent
from kfoundry.types import to_jsonable

HIDDEN_SETS = ("probe", "outlier")  # input sets the guard uses, never the trials


def _inputs_changed(before: list, after: list) -> int | None:
    """Index of the first input tensor that differs between the two lists, if any."""
    for i, (a, b) in enumerate(zip(before, after)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                return i
            b = b.to(a.device)
            same = a == b
            if a.is_floating_point():
                same |= torch.isnan(a) & torch.isnan(b)
            if not bool(same.all()):
                return i
    return None


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


class ExpectedSet:
    """One input set: its inputs, the reference's output on them and the float64 truth (the truth's
    leaves, float ones held as corrections: kfoundry.evaluate.truth)."""

    def __init__(self, name: str, seed: int, inputs: list, reference: Any, truth: Any,
                 index_sources: dict[int, IndexSource], inputs_after: list | None) -> None:
        self.name, self.seed, self.inputs = name, seed, inputs
        self.reference, self.truth, self.index_sources = reference, truth, index_sources
        self.inputs_after = inputs_after  # None: the reference leaves its inputs as they were


class Reference:
    """The problem's model (and its float64 copy) on the judge's device, and how to get any set."""

    def __init__(self, job: dict[str, Any], channel) -> None:
        self.job, self.channel = job, channel
        self.device = job["device"]
        self.dtype = problems.torch_dtype(job["precision"])
        source = problems.ProblemSource(path=Path(job["problem_path"]), text=job["problem_text"],
                                        overrides=job["overrides"])
        self.module = problems.load_problem_module(source)
        self.init_inputs = problems.init_inputs_of(self.module)
        try:
            self.model = problems.build_model(self.module.Model, self.init_inputs, job["init_seed"], self.dtype,
                                              self.device, job["eval_mode"])
        except Exception as exc:
            raise ProblemError(f"constructing the problem's Model raised {type(exc).__name__}: {exc}") from None
        self.truth_status = "float64"
        self.model64 = None
        try:
            import copy

            self.model64 = copy.deepcopy(self.model).to(torch.float64)
        except Exception as exc:
            self.truth_status = f"unavailable: the model could not be cast to float64 ({type(exc).__name__}: {exc})"
        trials = list(job["trial_seeds"])
        self.seeds = {str(k): seed for k, seed in enumerate(trials)}
        self.seeds["probe"] = job["probe_seed"]
        self.seeds["outlier"] = job["probe_seed"] + 1
        self.names = [str(k) for k in range(len(trials))] + list(HIDDEN_SETS)
        self.resident = bool(job.get("resident", True))
        self.sets: dict[str, ExpectedSet] = {}
        self._inputs0: list | None = None

    def make_inputs(self, name: str) -> list:
        if name == "outlier":
            return with_outliers(self.make_inputs("0"), self.seeds["outlier"])
        if name == "0" and self._inputs0 is not None:
            return clone_inputs(self._inputs0)
        return draw_inputs(self.module, self.seeds[name], self.dtype, self.device)

    def compute(self, name: str) -> ExpectedSet:
        inputs = self.make_inputs(name)
        seed = self.seeds[name]
        recorder = IndexRecorder()
        run_inputs = clone_inputs(inputs)
        problems.seed_everything(seed)  # the candidate's forward gets the same random state
        with torch.no_grad(), recorder:
            out = self.model(*run_inputs)
        synchronize(self.device)
        reference, truth = _detached(out), None
        if self.model64 is not None:
            try:
                problems.seed_everything(seed)
                with torch.no_grad():
                    full = _detached(self.model64(*upcast(clone_inputs(inputs))))
                truth = truths.compact(flatten_outputs(reference), flatten_outputs(full))
                del full
            except Exception as exc:
                self.truth_status = f"unavailable: the float64 reference failed ({type(exc).__name__}: {exc})"
                self.model64 = None
        sources = {i: IndexSource(**s) for i, s in recorder.sources_for(out).items()}
        for source in sources.values():
            source.values = source.values.to(self.device)
        after = None if _inputs_changed(inputs, run_inputs) is None else run_inputs
        return ExpectedSet(name, seed, inputs, reference, truth, sources, after)

    def get(self, name: str) -> ExpectedSet:
        found = self.sets.get(name)
        if found is None:
            found = self.compute(name)
            if not self.resident:
                self.sets.clear()  # one set at a time
            self.sets[name] = found
        return found


def _detached(value: Any) -> Any:
    """Outputs as plain tensors on the judge's device (CPU outputs of a GPU model stay where they are)."""
    if isinstance(value, torch.Tensor):
        return value.detach().as_subclass(torch.Tensor).clone()
    if isinstance(value, (list, tuple)):
        return [_detached(v) for v in value]
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    return value


def _layout(inputs: list) -> Any:
    """A set's tensor layouts as the `inputs` order describes them; None where they cannot be carried."""
    try:
        return transport.describe_tree(inputs, transport.tensor_meta)
    except transport.TransportError:
        return None


def prepare(ref: Reference, channel) -> dict[str, Any]:
    """Every set once (kept when resident), the weak-problem checks, the cost and the device's facts."""
    job, device = ref.job, ref.device
    tol = job["tolerance"]
    warnings: list[str] = []
    channel.phase("inputs")
    channel.phase("expected")
    first = ref.compute("0")
    if not any(isinstance(x, torch.Tensor) for x in flatten_outputs(first.reference)):
        # nothing to compare: every candidate would pass, or be judged a ghost
        found = "None" if first.reference is None else type(first.reference).__name__
        raise ProblemError(f"the problem's forward returns no tensor ({found}): a kernel is judged by the tensors "
                           "its forward returns, so Model.forward must return at least one")
    ref._inputs0 = clone_inputs(first.inputs)
    # the same inputs once more, the RNG not reset in between: random ops (Dropout) show as a difference
    with torch.no_grad():
        again = _detached(ref.model(*clone_inputs(first.inputs)))
    synchronize(device)
    if not all_close(first.reference, again, tol):
        warnings.append(NONDETERMINISTIC)
        ref.truth_status = "unavailable: the reference is random (two identical runs differ)"
        ref.model64 = None
        first.truth = None
    del again
    output_meta = [{"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}
                   for x in flatten_outputs(first.reference) if isinstance(x, torch.Tensor)]
    near, independent = near_zero(first.reference, tol), False
    cost = problems.measure_cost(ref.model, clone_inputs(first.inputs), first.reference)
    ref.sets["0"] = first
    layouts = {"0": _layout(first.inputs)}
    for name in ref.names[1:]:
        expected = ref.compute(name)
        layouts[name] = _layout(expected.inputs)
        near = near and near_zero(expected.reference, tol)
        if name == "probe":  # fresh data: the same output means it does not depend on its inputs
            independent = (all_close(expected.reference, first.reference, tol)
                           and not all_close(plain(expected.inputs), plain(first.inputs), 0.0))
        if ref.resident:
            ref.sets[name] = expected
        del expected
    if not ref.resident:
        ref.sets = {}
    if near:
        warnings.append(f"{NEAR_ZERO_PREFIX} ({tol:g}) of zero, so a kernel that writes zeros passes")
    if independent:
        warnings.append(INPUT_INDEPENDENT)
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
        "resident": ref.resident,
        # each set's tensor layouts: a worker allocates its buffers from these, with no order to ask for them
        "input_layouts": layouts,
    }
    if device.startswith("cuda"):
        synchronize(device)
        # the forwards' temporaries go back to the device: from now on the candidates' workers need it
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info(device)
        result["gpu_memory"] = {"free": free, "total": total, "judge_allocated": torch.cuda.memory_allocated(device)}
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
            changed = _inputs_changed(expected.inputs, list(after) if isinstance(after, (list, tuple)) else [after])
            if changed is not None and expected.inputs_after is not None:
                changed = None if _inputs_changed(expected.inputs_after, list(after)) is None else changed
            reply["changed_input"] = changed
            del after
    on = ref.device if ref.device.startswith("cuda") else None
    with spent(parts, "compare"):
        comparison = compare_outputs(data, expected.reference, expected.truth, atol, atol, expected.index_sources,
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
    t = truths.as_float64(t, r)
    try:
        pattern = error_pattern(c.to(r.device), r, atol, atol, t if isinstance(t, torch.Tensor) else None)
    except Exception as exc:  # evidence for the diagnosis, never a reason to lose the verdict
        return {"error": f"{type(exc).__name__}: {exc}"}
    pattern["output"], pattern["input_set"] = index, name
    return to_jsonable(pattern)


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


def run_judge(job: dict[str, Any], channel) -> dict[str, Any]:
    locks = ThreadLocks("judge")
    compile_off_gpu(locks)  # its comparison kernel compiles on the first compare
    channel.phase("load")
    started = time.monotonic()
    try:
        with locks.shared("reference"):
            ref = Reference(job, channel)
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
