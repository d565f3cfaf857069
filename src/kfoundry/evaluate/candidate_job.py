"""The candidate side of an evaluation, run in a fresh worker process of its own.

Loads the candidate, builds ModelNew with the reference's seed, runs it on each trial's inputs
(given as files: it never sees the expected outputs) and, on a GPU, times it. Outputs go back as
files; judging them is the parent's job.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import torch

from kfoundry import problem as problems
import kfoundry.evaluate.timing  # noqa: F401  (takes the timing functions before any candidate runs)
from kfoundry.evaluate.failures import describe_exception, describe_syntax_error
from kfoundry.evaluate.reference_job import plain, synchronize
from kfoundry.guard.dynamic import (LaunchTracker, OpRecorder, cuda_kernel_names, global_state, library_kernels,
                                    profile_kernels, state_changes)
from kfoundry.types import to_jsonable

CANDIDATE_MODULE = "kfoundry_candidate"


def uses_cuda_extension(source: str) -> bool:
    """True if the candidate builds CUDA C++ through torch.utils.cpp_extension."""
    try:
        tree = ast.parse(source)
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
        if decoy.is_floating_point() or decoy.is_complex():
            decoy.fill_(float("nan"))
        elif dtype == torch.bool:
            decoy.fill_(True)
        else:
            decoy.fill_(torch.iinfo(dtype).max // 2 if dtype != torch.uint8 else 255)
        del decoy


def load_model_class(path: str, source: str) -> tuple[type | None, dict[str, Any] | None]:
    """Import the candidate and find ModelNew: (the class, None) or (None, the failure's record)."""
    try:
        module = problems.load_module(Path(path), source, CANDIDATE_MODULE)
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


def run_candidate_job(job: dict[str, Any], channel) -> dict[str, Any]:
    path, device = job["candidate_path"], job["device"]
    workdir = Path.cwd()
    channel.phase("load")
    source = Path(path).read_text(encoding="utf-8")
    if not device.startswith("cuda") and uses_cuda_extension(source):
        return {
            "status": "runtime_error",
            "message": "CUDA candidates need a GPU: this candidate builds CUDA C++ with "
            "torch.utils.cpp_extension, which cannot run on the CPU (evaluate it with --device cuda on a GPU machine)",
            "error": {"type": "NeedsGPU", "phase": "load"},
        }
    state_before = global_state()  # before any of the candidate's code runs
    tracker = LaunchTracker().install()
    model_class, failure = load_model_class(path, source)
    if failure is not None:
        return failure

    channel.phase("init")
    dtype = problems.torch_dtype(job["precision"])
    try:
        init_inputs = torch.load(workdir / "init_inputs.pt", weights_only=False)
        model = problems.build_model(model_class, init_inputs, job["init_seed"], dtype, device, job["eval_mode"])
    except BaseException as exc:
        return describe_exception(exc, path, "init")

    def load_inputs(name: str) -> list:
        return [x.to(device) if isinstance(x, torch.Tensor) else x
                for x in torch.load(workdir / f"inputs_{name}.pt", weights_only=False, mmap=True)]

    def run(inputs: list, seed: int, recorder: OpRecorder | None = None, poisoned: bool = True) -> Any:
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
        return out

    def save(name: str, out: Any, inputs: list) -> None:
        torch.save({"output": plain(out), "inputs_after": plain(inputs)}, workdir / f"{name}.pt")

    # Triton and load_inline compile on the first call: give that its own phase (and time)
    channel.phase("compile")
    phase = "compile"
    seeds = job["trial_seeds"]
    guard: dict[str, Any] = {}
    try:
        run(load_inputs("0"), seeds[0])
        channel.phase("correctness")
        phase = "correctness"
        recorder = OpRecorder(tracker)
        launches = []
        for k, seed in enumerate(seeds):
            inputs = load_inputs(str(k))
            before = tracker.launches
            out = run(inputs, seed, recorder)
            launches.append(tracker.launches - before)
            save(f"outputs_{k}", out, inputs)
            del out
        inputs = load_inputs("0")  # trial 0 again, same seed: a race shows as a different result
        save("repeat_0", run(inputs, seeds[0], recorder), inputs)
        guard.update(launches_per_trial=launches, extension_calls=tracker.extension_calls,
                     ops=recorder.ops, compute_ops=recorder.compute_ops(), kernel_names=sorted(tracker.kernel_names))

        channel.phase("guard")
        phase = "guard"
        profile: dict[str, Any] = {}
        guard_runs(job, tracker, run, save, load_inputs, guard, device, source, profile)
        guard["state_changes"] = state_changes(state_before, global_state())
        if tracker.compiled:
            from kfoundry.evaluate.kernel_metadata import triton_metadata

            profile["triton"] = triton_metadata(tracker.compiled)
        result: dict[str, Any] = {"status": "ran", "guard": guard, "profile": profile}
        if job.get("timing") and device.startswith("cuda"):
            phase = "timing"
            channel.phase("timing")
            tracker.uninstall()  # timed as a user would run it: no launch hooks
            result["timing"] = time_candidate(job, model, load_inputs("0"), workdir, device)  # the baselines' inputs
    except BaseException as exc:
        return describe_exception(exc, path, phase)
    finally:
        tracker.uninstall()
    return result


def guard_runs(job, tracker: LaunchTracker, run, save, load_inputs, guard: dict[str, Any], device: str,
               source: str, profile: dict[str, Any]) -> None:
    """The extra runs the guard judges: kernels off (ghost), new data in the same tensors and the
    same data in new tensors (caching), sparse outliers (shortcuts), and on a GPU the kernel list
    (which also goes to `profile`, with each launch's duration, for the diagnosis)."""
    seeds, probe_seed = job["trial_seeds"], job["probe_seed"]
    # On inputs no run has seen yet: memory freed by the trials holds their right answers, and an
    # output buffer that reuses it (CPU allocators do, whatever the poison) would pass a ghost run on them.
    inputs = load_inputs("probe")
    tracker.ghost = True
    try:
        save("ghost_output", run(inputs, probe_seed), inputs)
    finally:
        tracker.ghost = False
    # same addresses, new data: a result cached by address would come back
    inputs = load_inputs("0")
    run(inputs, seeds[0])
    for target, fresh in zip(inputs, load_inputs("probe")):
        if isinstance(target, torch.Tensor) and isinstance(fresh, torch.Tensor) and target.shape == fresh.shape:
            target.copy_(fresh)
    save("cache_refill", run(inputs, probe_seed), inputs)
    # the same data at new addresses, the old tensors still alive
    moved = load_inputs("probe")
    save("cache_moved", run(moved, probe_seed), moved)
    del inputs, moved
    outliers = load_inputs("outlier")
    save("outlier_output", run(outliers, probe_seed + 1), outliers)
    if device.startswith("cuda"):
        inputs = load_inputs("0")
        try:
            poison(job.get("output_meta"), device)  # before, not inside, the profile: it is the harness's kernel
            trace = profile_kernels(lambda: run(inputs, seeds[0], poisoned=False))
            own = set(tracker.kernel_names) | cuda_kernel_names(source)
            guard.update(kernels=[k["name"] for k in trace["kernels"]], streams=trace["streams"],
                         library_kernels=library_kernels(trace["kernels"], own))
            profile["kernels"] = trace["kernels"]
        except Exception as exc:  # the profiler is a check, not a requirement
            guard["profile_error"] = f"{type(exc).__name__}: {exc}"


def time_candidate(job: dict[str, Any], model, run_inputs: list, workdir: Path, device: str) -> dict[str, Any]:
    from kfoundry.evaluate.timing import GpuTimer, peak_memory

    timing = job["timing"]

    def call():
        with torch.no_grad():
            return model(*run_inputs)

    timer = GpuTimer(device)
    stats, last = timer.time(call, trials=timing["trials"], budget_s=timing["budget_s"])
    torch.save({"output": plain(last), "inputs_after": plain(run_inputs)}, workdir / "timing_output.pt")
    del last
    return {"stats": to_jsonable(stats), "peak_memory_bytes": peak_memory(device, call),
            "host_overhead_ms": timer.host_overhead_ms}
