"""The candidate side of an evaluation, run in a fresh worker process of its own.

Loads the candidate, builds ModelNew with the reference's seed, runs it on each set's inputs (which
the judge puts in this worker's own memory or folder: it never sees the expected outputs) and, on a
GPU, times it. Each output goes to the judge as soon as it exists (kfoundry.evaluate.shared.transport) and
is freed once judged, so a worker holds one set's inputs and outputs at a time; the parent stops it
at the first wrong trial. GPU work runs under the GPU lock's shared side, timing under its exclusive
side, and the lock is never held while waiting for the judge (who may need it).
"""

from __future__ import annotations

import ast
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from kfoundry import source_ast
from kfoundry import problem as problems
from kfoundry.evaluate.reference.reference_job import plain, synchronize
from kfoundry.evaluate.shared import transport
from kfoundry.evaluate.timing.compiling import PHASES as COMPILE_PHASES
from kfoundry.evaluate.timing.compiling import compile_off_gpu, fail_fast_over_shared_memory
from kfoundry.evaluate.timing.gpu_lock import process_lock
from kfoundry.evaluate.timing.gpu_timer import flush_page_cache, spent  # imported first: a candidate cannot swap its timers
from kfoundry.evaluate.worker import emulated_precision
from kfoundry.evaluate.worker.failures import describe_exception, describe_syntax_error
from kfoundry.guard.dynamic import (LaunchTracker, OpRecorder, cuda_kernel_names, fill_poison, global_state,
                                    held_storages, kept_outputs, library_kernels, profile_kernels, state_changes)
from kfoundry.types import to_jsonable

CANDIDATE_MODULE = "kfoundry_candidate"


def uses_cuda_extension(source: str) -> bool:
    """True if the candidate builds CUDA C++ through torch.utils.cpp_extension."""
    try:
        tree = source_ast.parse(source)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "load_inline" and (any(k.arg == "cuda_sources" for k in node.keywords) or len(node.args) >= 3):
                return True
            if name == "load" and ".cu" in ast.unparse(node):
                return True
    return False


def poison(output_meta: list[dict[str, Any]], device: str) -> None:
    """Fill memory of each output's size with NaN (or a sentinel) and free it, so that an
    allocation that is not written reads as garbage, not as someone else's right answer."""
    for meta in output_meta or []:
        dtype = getattr(torch, meta["dtype"], None)
        if dtype is None:
            continue
        decoy = torch.empty(meta["shape"], dtype=dtype, device=device)
        fill_poison(decoy)
        del decoy


def candidate_code(path: str, source: str, overrides: dict[str, Any] | None) -> str | ast.Module:
    """The candidate as it runs under the problem's --set values: a module-level constant the candidate keeps a
    copy of (one written from the problem file, whose __init__ reads `batch_size`) takes the value the problem's
    takes; constants the candidate does not define are left to the problem."""
    if not overrides:
        return source
    tree = source_ast.parse(source, filename=path)
    own = problems.module_constants(tree)
    shared = {name: value for name, value in overrides.items() if name in own}
    return problems.apply_overrides(tree, shared, Path(path)) if shared else source


def load_model_class(path: str, source: str,
                     overrides: dict[str, Any] | None = None) -> tuple[type | None, dict[str, Any] | None]:
    """Import the candidate (its copies of the problem's constants at the --set values) and find ModelNew:
    (the class, None) or (None, the failure's record)."""
    try:
        module = problems.load_module(Path(path), candidate_code(path, source, overrides), CANDIDATE_MODULE)
    except SyntaxError as exc:
        return None, describe_syntax_error(exc)
    except BaseException as exc:
        return None, describe_exception(exc, path, "load")
    model_class = getattr(module, "ModelNew", None)
    if not isinstance(model_class, type) or not issubclass(model_class, torch.nn.Module):
        found = "defines no ModelNew" if model_class is None else f"defines ModelNew as a {type(model_class).__name__}"
        return None, {"status": "compile_error", "error": {"type": "MissingModelNew", "phase": "load"},
                      "message": f"the candidate {found}: it must define class ModelNew(nn.Module)"}
    return model_class, None


class Stopped(Exception):
    """The parent ended the evaluation early (a wrong trial: the verdict is known)."""


class Exchange:
    """This worker's side of the transport: inputs from the judge, outputs to it. `seconds` gathers the
    time spent waiting on the judge for inputs and for checks."""

    def __init__(self, channel, device: str, mode: str, workdir: Path, seconds: Counter | None = None,
                 layouts: dict[str, Any] | None = None) -> None:
        self.channel, self.device, self.mode, self.workdir = channel, device, mode, workdir
        self.seconds = seconds if seconds is not None else Counter()
        # each set's tensor layouts, as the judge described them when it prepared; one it did not is asked for
        self._layouts: dict[str, Any] = {k: v for k, v in (layouts or {}).items() if v is not None}
        self._filled: dict[str, list] = {}  # a set's buffers the judge filled with a check's answer

    def _ask(self, kind: str, **data: Any) -> dict[str, Any]:
        with spent(self.seconds, "judge " + ("inputs" if kind in ("inputs", "fill") else kind)):
            reply = self.channel.request(kind, **data)
        if reply.get("stop"):
            raise Stopped(reply.get("reason", "stopped by the parent"))
        if "error" in reply:
            raise RuntimeError(f"the judge could not serve {kind}: {reply['error']}")
        return reply

    def _buffers(self, meta: Any) -> Any:
        def buffer(desc: dict[str, Any]) -> torch.Tensor:
            dtype = transport.DTYPES[desc["dtype"]]
            return torch.empty_strided(desc["shape"], desc["stride"], dtype=dtype, device=self.device)

        return transport.build_tree(meta, buffer)

    def inputs(self, name: str) -> list:
        ready = self._filled.pop(name, None)
        if ready is not None:
            return ready
        meta = self._layouts.get(name) if self.mode != "file" else None
        if meta is None:
            reply = self._ask("inputs", set=name, mode=self.mode)
            if "file" in reply:
                path = transport.file_in(self.workdir, reply["file"])
                loaded = torch.load(path, weights_only=True)
                path.unlink()
                return [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in loaded]
            meta = self._layouts[name] = reply["tree"]
        values = self._buffers(meta)
        self._ask("fill", set=name, buffers=transport.describe_tree(values, transport.share))
        torch.cuda.ipc_collect()
        return list(values)

    def _describe(self, value: Any, stem: str, files: list[Path]) -> Any:
        if self.mode == "ipc" and transport.carriable(value):
            def leaf(x: torch.Tensor) -> dict[str, Any]:
                x = x.detach().as_subclass(torch.Tensor)
                return transport.share(x if x.device.type == "cuda" else x.to(self.device))

            return transport.describe_tree(value, leaf)
        name = f"{stem}.pt"
        torch.save(plain(value), self.workdir / name)
        files.append(self.workdir / name)
        return {"file": name}

    def check(self, label: str, name: str, out: Any, inputs: list | None = None, repeat: Any = None,
              then: str | None = None) -> None:
        """Send one output (and the inputs after the run, and a repeat run's output) to be judged; `then`:
        the set this worker asks for next, filled by the judge with the answer (CUDA IPC) where it can."""
        files: list[Path] = []
        stem = "".join(c if c.isalnum() else "-" for c in label)
        try:
            data = {"outputs": self._describe(out, f"out-{stem}", files)}
            if inputs is not None:
                data["inputs"] = self._describe(list(inputs), f"in-{stem}", files)
            if repeat is not None:
                data["repeat"] = self._describe(repeat, f"repeat-{stem}", files)
            meta = self._layouts.get(then) if then is not None and self.mode == "ipc" else None
            values = self._buffers(meta) if meta is not None else None
            if values is not None:
                data["fill"] = {"set": then, "buffers": transport.describe_tree(values, transport.share)}
            if self._ask("check", label=label, set=name, **data).get("filled") and values is not None:
                self._filled[then] = list(values)
        finally:
            for path in files:
                path.unlink(missing_ok=True)
            if self.device.startswith("cuda"):
                torch.cuda.ipc_collect()


def run_candidate_job(job: dict[str, Any], channel) -> dict[str, Any]:
    path, device = job["candidate_path"], job["device"]
    workdir = Path.cwd()
    lock = process_lock("candidate")
    gpu = lock.shared

    channel.phase("load")
    source = Path(path).read_text(encoding="utf-8")
    if not device.startswith("cuda") and uses_cuda_extension(source):
        return {
            "status": "runtime_error",
            "message": "CUDA candidates need a GPU: this candidate builds CUDA C++ with "
            "torch.utils.cpp_extension, which cannot run on the CPU (evaluate it with --device cuda on a GPU machine)",
            "error": {"type": "NeedsGPU", "phase": "load"},
        }
    if not device.startswith("cuda"):  # the interpreter's tl.dot rounded as the GPU's tensor cores round
        emulated_precision.install()
        emulated_precision.DOTS.clear()
    state_before = global_state()  # before any of the candidate's code runs
    tracker = LaunchTracker().install()
    seconds: Counter = Counter()
    compile_off_gpu(lock, seconds)
    fail_fast_over_shared_memory()
    model_class, failure = load_model_class(path, source, job.get("overrides"))
    if failure is not None:
        return failure

    channel.phase("init")
    dtype = problems.torch_dtype(job["precision"])
    try:
        init_inputs = torch.load(workdir / "init_inputs.pt", weights_only=False)
        with gpu("init"):
            model = problems.build_model(model_class, init_inputs, job["init_seed"], dtype, device, job["eval_mode"])
    except BaseException as exc:
        return describe_exception(exc, path, "init")
    exchange = Exchange(channel, device, job.get("transport", "file"), workdir, seconds, job.get("input_layouts"))

    def counted_apart() -> float:
        """What a run's wall time holds that is reported under other names: lock waits and compiles."""
        return lock.waited_s + sum(seconds[name] for name in COMPILE_PHASES)

    def run(inputs: list, seed: int, recorder: OpRecorder | None = None, poisoned: bool = True,
            phase: str = "run") -> Any:
        started, elsewhere = time.perf_counter(), counted_apart()
        with gpu(phase):
            if poisoned:
                poison(job.get("output_meta"), device)
            problems.seed_everything(seed)  # the reference's random state for this input set
            tracker.protected = {id(x) for x in inputs}
            with torch.no_grad():
                if recorder is None:
                    out = model(*inputs)
                else:
                    with recorder:
                        out = model(*inputs)
            synchronize(device)
        seconds["run"] += time.perf_counter() - started - (counted_apart() - elsewhere)
        return out

    # Triton and load_inline compile on the first call: give that its own phase (and time)
    channel.phase("compile")
    phase = "compile"
    seeds = job["trial_seeds"]
    runs_for_guard = job.get("guard_runs", True)
    # the set the last trial's check asks the judge for next: the guard's ghost run's, else the timed run's
    after_trials = "probe" if runs_for_guard else ("0" if device.startswith("cuda") else None)
    guard: dict[str, Any] = {}
    derived = None
    try:
        run(exchange.inputs("0"), seeds[0], phase="compile")
        channel.phase("correctness")
        phase = "correctness"
        recorder = OpRecorder(tracker)
        launches = []
        for k, seed in enumerate(seeds):
            inputs = exchange.inputs(str(k))
            before = tracker.launches
            out = run(inputs, seed, recorder, phase="correctness")
            launches.append(tracker.launches - before)
            repeat = None
            if k == 0:  # trial 0 again, same seed: a race shows as a different result
                again = exchange.inputs("0")
                repeat = run(again, seeds[0], recorder, phase="correctness")
                del again
            exchange.check(f"trial {k}", str(k), out, inputs, repeat,
                           then=str(k + 1) if k + 1 < len(seeds) else after_trials)  # e.g. the ghost run's
            del out, inputs, repeat
        guard.update(launches_per_trial=launches, extension_calls=tracker.extension_calls,
                     ops=recorder.ops, compute_ops=recorder.compute_ops(), kernel_names=sorted(tracker.kernel_names),
                     graph_replays=tracker.graphs.replays)  # launches replayed from CUDA graphs (graph_watch.py)

        profile: dict[str, Any] = {}
        if runs_for_guard:
            channel.phase("guard")
            phase = "guard"
            guard_runs(job, tracker, run, exchange, guard, device, source, profile, gpu, seconds, model)
        guard["state_changes"] = state_changes(state_before, global_state())
        if tracker.compiled:
            from kfoundry.evaluate.worker.kernel_metadata import triton_metadata

            profile["triton"] = triton_metadata(tracker.compiled)
        elif tracker.interpreted and job.get("static_target"):
            from kfoundry.evaluate.worker.target_compile import derive, known_rows

            profile["triton"] = known_rows(job.get("target_rows"), tracker.interpreted)  # the parent's cache
            if profile["triton"] is None:
                channel.phase("target compile")
                with spent(seconds, "target compile"):
                    profile["triton"] = derive(path, tracker.interpreted, job["static_target"])
                derived = tracker.interpreted  # for the parent to keep, under this candidate's source
        result: dict[str, Any] = {"status": "ran", "guard": guard, "profile": profile}
        if derived is not None:
            result["target_launches"] = derived
        if not device.startswith("cuda"):
            result["dots"] = emulated_precision.report()
        if job.get("timing") and device.startswith("cuda"):
            phase = "timing"
            channel.phase("timing")
            tracker.uninstall()  # timed as a user would run it: no launch hooks
            inputs = exchange.inputs("0")  # the baselines' inputs
            with spent(seconds, "page cache flush"):
                flush_page_cache()  # before the exclusive phase: writing out dirty pages is no GPU work
            trials_budget = channel.request("trials budget").get("trials_budget_s")
            waited = lock.waited_s
            with lock.exclusive("timing"):
                seconds["timing queue"] += lock.waited_s - waited
                result["timing"], last = time_candidate(job, model, inputs, device, trials_budget)
            channel.phase("timing check")
            exchange.check("the last timed run", "0", last, inputs)
            del last
        seconds["gpu lock wait"] = lock.waited_s - seconds["timing queue"]
        result["seconds"] = {k: round(v, 4) for k, v in seconds.items()}
    except Stopped as stop:
        return {"status": "stopped", "reason": str(stop)}
    except BaseException as exc:
        return describe_exception(exc, path, phase)
    finally:
        tracker.uninstall()
    return result


def guard_runs(job, tracker: LaunchTracker, run, exchange: Exchange, guard: dict[str, Any], device: str,
               source: str, profile: dict[str, Any], gpu, seconds: Counter, model: torch.nn.Module) -> None:
    """The extra runs the guard judges: kernels off (ghost), new data in the same tensors and the
    same data in new tensors (caching), sparse outliers (shortcuts), and on a GPU the kernel list
    (which also goes to `profile`, with each launch's duration, for the diagnosis)."""
    seeds, probe_seed = job["trial_seeds"], job["probe_seed"]
    ghost_run(tracker, run, exchange, model, probe_seed, gpu)
    # same addresses, new data: a result cached by address would come back
    inputs = exchange.inputs("0")
    run(inputs, seeds[0], phase="guard")
    fresh = exchange.inputs("probe")
    with gpu("guard"):
        for target, new in zip(inputs, fresh):
            if isinstance(target, torch.Tensor) and isinstance(new, torch.Tensor) and target.shape == new.shape:
                target.copy_(new)
    del fresh
    # the same data at new addresses (filled with the refill's answer), the old tensors still alive
    exchange.check("cache refill", "probe", run(inputs, probe_seed, phase="guard"), then="probe")
    moved = exchange.inputs("probe")
    exchange.check("cache moved", "probe", run(moved, probe_seed, phase="guard"), then="outlier")
    del inputs, moved
    outliers = exchange.inputs("outlier")
    exchange.check("outliers", "outlier", run(outliers, probe_seed + 1, phase="guard"),
                   then="0" if device.startswith("cuda") else None)  # the profile's
    del outliers
    if device.startswith("cuda"):
        inputs = exchange.inputs("0")
        try:
            with gpu("poison"):
                poison(job.get("output_meta"), device)  # before, not inside, the profile: it is the harness's kernel
            with spent(seconds, "profiler"):
                trace = profile_kernels(lambda: run(inputs, seeds[0], poisoned=False, phase="profile"))
            own = set(tracker.kernel_names) | cuda_kernel_names(source)
            guard.update(kernels=[k["name"] for k in trace["kernels"]], streams=trace["streams"],
                         library_kernels=library_kernels(trace["kernels"], own))
            profile["kernels"] = trace["kernels"]
        except Exception as exc:  # the profiler is a check, not a requirement
            guard["profile_error"] = f"{type(exc).__name__}: {exc}"


def ghost_run(tracker: LaunchTracker, run, exchange: Exchange, model: torch.nn.Module, probe_seed: int,
              gpu) -> None:
    """Kernels off, on inputs no run has seen: the output must not be right. Every tensor forward
    allocates uninitialised is poisoned (the recorder), so what memory freed by earlier calls holds
    (their right answers, on a problem whose output barely depends on its inputs) cannot pass.
    An output the model holds (a buffer its kernels rewrite, or a value computed once) is right
    either way: it is poisoned and forward runs again with its kernels, which must rewrite it."""
    inputs = exchange.inputs("probe")
    tracker.ghost = True
    try:
        out = run(inputs, probe_seed, OpRecorder(tracker), phase="guard")
    finally:
        tracker.ghost = False
    kept = kept_outputs(out, held_storages(model))
    exchange.check("ghost", "probe", out, then="probe" if kept else "0")
    del out, inputs
    if not kept:
        return
    with gpu("guard"):
        saved = [tensor.clone() for tensor in kept]
        for tensor in kept:
            fill_poison(tensor)
    again = exchange.inputs("probe")
    exchange.check("ghost kept", "probe", run(again, probe_seed, OpRecorder(tracker), phase="guard"), then="0")
    with gpu("guard"):  # as it was: the later checks judge the candidate, not this probe's poison
        for tensor, value in zip(kept, saved):
            tensor.copy_(value)


def time_candidate(job: dict[str, Any], model, run_inputs: list, device: str,
                   trials_budget_s: float | None = None) -> tuple[dict[str, Any], Any]:
    from kfoundry.evaluate.timing.gpu_timer import GpuTimer, peak_memory

    timing = job["timing"]

    def call():
        with torch.no_grad():
            return model(*run_inputs)

    started = time.perf_counter()
    timer = GpuTimer(device)
    made = time.perf_counter()
    stats, last = timer.time(call, trials=timing["trials"], budget_s=timing["budget_s"], flush_files=False,
                             trials_budget_s=trials_budget_s)
    timed = time.perf_counter()
    peak = peak_memory(device, call)
    # where the GPU's exclusive time goes, for the throughput benchmark
    seconds = {"timer_setup_s": made - started, "timing_s": timed - made, "peak_memory_s": time.perf_counter() - timed}
    return {"stats": to_jsonable(stats), "peak_memory_bytes": peak, "host_overhead_ms": timer.host_overhead_ms,
            "exclusive_seconds": {k: round(v, 4) for k, v in seconds.items()}}, last
