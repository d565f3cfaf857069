"""The reference side of an evaluation, run in a process that never imports a candidate.

Writes, for every trial, the inputs and the expected outputs (the PyTorch reference and its float64
ground truth) to the exchange directory; checks whether the problem is weak; measures the
problem's cost, the device's facts and (on a GPU) the eager and torch.compile baselines.
"""

from __future__ import annotations

import copy
import json
import traceback
from pathlib import Path
from typing import Any

import torch

from kfoundry import problem as problems
from kfoundry.errors import ProblemError
from kfoundry.evaluate.baselines import baseline_key, load_baselines, save_baselines
from kfoundry.evaluate.compare import flatten_outputs
from kfoundry.evaluate.device_facts import device_facts
from kfoundry.evaluate.index_sources import IndexRecorder
from kfoundry.types import to_jsonable


def plain(value: Any) -> Any:
    """Outputs as plain CPU tensors (or plain values), in their nested structure."""
    if isinstance(value, torch.Tensor):
        moved = value.detach().to("cpu").as_subclass(torch.Tensor)
        # copying to the CPU already made a tensor of its own; only a CPU tensor needs the clone
        return moved if value.device.type != "cpu" else moved.clone()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def upcast(value: Any) -> Any:
    return problems.cast_floats(value, torch.float64)


def clone_inputs(inputs: list) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in inputs]


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def all_close(a: Any, b: Any, tol: float) -> bool:
    la, lb = flatten_outputs(a), flatten_outputs(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or not torch.allclose(x.double(), y.double(), atol=tol, rtol=tol, equal_nan=True):
                return False
        elif x != y:
            return False
    return True


def near_zero(value: Any, tol: float) -> bool:
    leaves = [x for x in flatten_outputs(value) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    return bool(leaves) and all(bool((x.double().abs() <= tol).all()) for x in leaves)


def with_outliers(inputs: list, seed: int, fraction: float = 1e-3) -> list:
    """A copy of the inputs with a sparse set of large values in each floating tensor."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0:
            y = x.detach().clone()
            flat = y.view(-1) if y.is_contiguous() else y.reshape(-1)
            count = max(1, int(flat.numel() * fraction))
            index = torch.randint(0, flat.numel(), (count,), generator=generator).to(flat.device)
            signs = (torch.randint(0, 2, (count,), generator=generator) * 2 - 1).to(flat.device, flat.dtype)
            magnitude = 10.0 * max(1.0, float(x.detach().abs().max()))
            flat[index] = signs * magnitude
            if not y.is_contiguous():
                y = flat.view(y.shape)
            out.append(y)
        else:
            out.append(x)
    return out


NONDETERMINISTIC = (
    "weak problem: the reference's output differs between two identical runs "
    "(random ops such as Dropout in training mode; try --eval-mode): no candidate can match it reliably"
)


NEAR_ZERO_PREFIX = "weak problem: every reference output is within the tolerance"
INPUT_INDEPENDENT = (
    "weak problem: the reference's output does not depend on its inputs "
    "(two different input sets give the same output), so a kernel can return a constant"
)


def runs_differ(model, inputs: list, seed: int, tol: float) -> bool:
    """Two runs in a row on the same inputs (the RNG not reset in between) disagree."""
    problems.seed_everything(seed)
    with torch.no_grad():
        first = plain(model(*clone_inputs(inputs)))
        second = plain(model(*clone_inputs(inputs)))
    return not all_close(first, second, tol)


def weak_problem_warnings(model, module, job, inputs0, ref0, refs, tol) -> list[str]:
    """Problems on which a comparison proves nothing (besides randomness, checked first)."""
    device, dtype = job["device"], problems.torch_dtype(job["precision"])
    warnings = []
    if all(near_zero(r, tol) for r in refs):
        warnings.append(f"{NEAR_ZERO_PREFIX} ({tol:g}) of zero, so a kernel that writes zeros passes")
    other_seed = job["trial_seeds"][1] if len(job["trial_seeds"]) > 1 else job["trial_seeds"][0] + 1
    other_inputs = problems.make_inputs(module, other_seed, dtype, device)
    problems.seed_everything(job["trial_seeds"][0])
    with torch.no_grad():
        other = plain(model(*other_inputs))
    if all_close(other, ref0, tol) and not all_close(plain(other_inputs), plain(inputs0), 0.0):
        warnings.append(INPUT_INDEPENDENT)
    return warnings


def run_reference_job(job: dict[str, Any], channel) -> dict[str, Any]:
    device = job["device"]
    exchange = Path(job["exchange_dir"])
    channel.phase("load")
    source = problems.ProblemSource(
        path=Path(job["problem_path"]), text=job["problem_text"], overrides=job["overrides"],
    )
    try:
        module = problems.load_problem_module(source)
        dtype = problems.torch_dtype(job["precision"])
        init_inputs = problems.init_inputs_of(module)
        channel.phase("init")
        try:
            model = problems.build_model(module.Model, init_inputs, job["init_seed"], dtype, device, job["eval_mode"])
        except Exception as exc:
            raise ProblemError(f"constructing the problem's Model raised {type(exc).__name__}: {exc}") from None
    except ProblemError as exc:
        return {"problem_error": str(exc)}
    torch.save(init_inputs, exchange / "init_inputs.pt")

    channel.phase("correctness")
    tol = job["tolerance"]
    model64 = None
    truth_status = "float64"
    try:
        model64 = copy.deepcopy(model).to(torch.float64)
    except Exception as exc:
        truth_status = f"unavailable: the model could not be cast to float64 ({type(exc).__name__}: {exc})"
    refs, inputs0, output_meta = [], None, None
    warnings: list[str] = []
    state = {"model64": model64, "truth_status": truth_status}

    def expected(inputs: list, seed: int, name: str) -> Any:
        """Save the inputs and the expected outputs of one input set; return the reference output."""
        torch.save(plain(inputs), exchange / f"inputs_{name}.pt")
        recorder = IndexRecorder()
        run_inputs = clone_inputs(inputs)
        problems.seed_everything(seed)  # the candidate's forward gets the same random state
        with torch.no_grad(), recorder:
            out = model(*run_inputs)
        synchronize(device)
        ref, truth = plain(out), None
        if state["model64"] is not None:
            try:
                problems.seed_everything(seed)
                with torch.no_grad():
                    truth = plain(state["model64"](*upcast(clone_inputs(inputs))))
            except Exception as exc:
                state["truth_status"] = f"unavailable: the float64 reference failed ({type(exc).__name__}: {exc})"
                state["model64"] = None
        torch.save({"reference": ref, "truth": truth, "index_sources": recorder.sources_for(out),
                    "inputs_after": plain(run_inputs)}, exchange / f"expected_{name}.pt")
        return ref

    try:
        for k, seed in enumerate(job["trial_seeds"]):
            inputs = problems.make_inputs(module, seed, dtype, device)
            if k == 0 and runs_differ(model, inputs, seed, tol):
                warnings.append(NONDETERMINISTIC)
                state.update(truth_status="unavailable: the reference is random (two identical runs differ)",
                             model64=None)
            refs.append(expected(inputs, seed, str(k)))
            if k == 0:
                inputs0 = inputs
                output_meta = [
                    {"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}
                    for x in flatten_outputs(refs[0]) if isinstance(x, torch.Tensor)
                ]
        # hidden input sets for the guard: fresh data (output caching) and sparse outliers (shortcuts)
        expected(problems.make_inputs(module, job["probe_seed"], dtype, device), job["probe_seed"], "probe")
        expected(with_outliers(inputs0, job["probe_seed"] + 1), job["probe_seed"] + 1, "outlier")
    except ProblemError as exc:
        return {"problem_error": str(exc)}
    except Exception as exc:
        return {"problem_error": f"the problem's Model raised {type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()}
    truth_status = state["truth_status"]
    model64 = state["model64"]
    del model64
    warnings += weak_problem_warnings(model, module, job, inputs0, refs[0], refs, tol)
    cost = problems.measure_cost(model, inputs0, refs[0])
    cache_dir = Path(job["cache_dir"]) if job.get("cache_dir") else None
    facts = device_facts(device, cache_dir, measure=job.get("measure_device", True))

    result: dict[str, Any] = {
        "warnings": warnings,
        "weak": {"random": NONDETERMINISTIC in warnings,
                 "near_zero": any(w.startswith(NEAR_ZERO_PREFIX) for w in warnings),
                 "input_independent": INPUT_INDEPENDENT in warnings},
        "truth": truth_status,
        "output_meta": output_meta,
        "cost": to_jsonable(cost),
        "device_facts": to_jsonable(facts),
    }
    if device.startswith("cuda") and job.get("timing"):
        channel.phase("timing")
        result["baselines"] = time_baselines(job, model, inputs0, facts)
    return result


def time_baselines(job: dict[str, Any], model, inputs: list, facts) -> dict[str, Any]:
    """Eager and torch.compile timings of the reference, cached on disk."""
    from kfoundry.evaluate.timing import GpuTimer, peak_memory

    timing = job["timing"]
    device = job["device"]
    key = baseline_key(job, facts)
    cache_dir = Path(job["cache_dir"]) if job.get("cache_dir") else None
    if cache_dir is not None and not timing.get("no_cache"):
        cached = load_baselines(cache_dir, key)
        if cached is not None and all(name in cached["stats"] or name in cached["errors"] for name in timing["baselines"]):
            cached["cached"] = True
            return cached
    timer = GpuTimer(device)
    stats: dict[str, Any] = {}
    errors: dict[str, str] = {}
    peak = None
    for name in timing["baselines"]:
        try:
            if name == "eager":
                fn_model = model
            else:
                mode = None if name == "compile" else name.removeprefix("compile-")
                fn_model = torch.compile(model, mode=mode)
            run_inputs = clone_inputs(inputs)

            def call(m=fn_model, args=run_inputs):
                with torch.no_grad():
                    return m(*args)

            result, _ = timer.time(call, trials=timing["trials"], budget_s=timing["budget_s"])
            stats[name] = to_jsonable(result)
            if name == "eager":
                peak = peak_memory(device, call)
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    record = {"key": key, "stats": stats, "errors": errors, "peak_memory_bytes": peak,
              "flush_bytes": timer.flush_buffer.numel() * 4, "host_overhead_ms": timer.host_overhead_ms}
    if cache_dir is not None:
        save_baselines(cache_dir, key, record)
    record["cached"] = False
    return json.loads(json.dumps(record))
