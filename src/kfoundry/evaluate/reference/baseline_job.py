"""The baselines: eager and torch.compile timings of the reference, in a process of their own.

It never imports a candidate. It builds the model and the first trial's inputs exactly as the judge
does (same seeds, same code), so the baselines time the very computation the candidates are timed
on, and it runs beside the candidates' pipeline instead of before it: torch.compile's compilation
takes tens of seconds on the CPU, and only its timed trials need the GPU to themselves (the GPU
lock's exclusive side, like a candidate's timing).
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from kfoundry import problem as problems
from kfoundry.errors import ProblemError
from kfoundry.evaluate.reference.baselines import load_baselines, save_baselines
from kfoundry.evaluate.reference.reference_job import clone_inputs, draw_inputs
from kfoundry.evaluate.timing.compiling import compile_off_gpu
from kfoundry.evaluate.timing.gpu_lock import process_lock
from kfoundry.types import to_jsonable


def run_baseline_job(job: dict[str, Any], channel) -> dict[str, Any]:
    from kfoundry.evaluate.timing.gpu_timer import GpuTimer, flush_page_cache, peak_memory

    timing, device, key = job["timing"], job["device"], job["key"]
    cache_dir = Path(job["cache_dir"]) if job.get("cache_dir") else None
    if cache_dir is not None and not timing.get("no_cache"):
        cached = load_baselines(cache_dir, key)
        if cached is not None and all(name in cached["stats"] or name in cached["errors"]
                                      for name in timing["baselines"]):
            cached["cached"] = True
            return cached
    channel.phase("load")
    lock = process_lock("baselines")
    source = problems.ProblemSource(path=Path(job["problem_path"]), text=job["problem_text"],
                                    overrides=job["overrides"])
    try:
        module = problems.load_problem_module(source)
        dtype = problems.torch_dtype(job["precision"])
        init_inputs = problems.init_inputs_of(module)
        with lock.shared("baseline set-up"):
            model = problems.build_model(module.Model, init_inputs, job["init_seed"], dtype, device, job["eval_mode"])
            inputs = draw_inputs(module, job["trial_seeds"][0], dtype, device)  # the judge's trial 0
    except ProblemError as exc:
        return {"problem_error": str(exc)}
    except Exception as exc:
        return {"problem_error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    stats: dict[str, Any] = {}
    errors: dict[str, str] = {}
    peak = None
    timer = None
    wrapped = False
    # eager first: the first verdicts wait for its figure, and none of it needs inductor (a second to import)
    for name in sorted(timing["baselines"], key=lambda name: name != "eager"):
        channel.phase(f"baseline {name}")
        if name != "eager" and not wrapped:
            compile_off_gpu(lock, inductor=True)
            wrapped = True
        try:
            if not device.startswith("cuda"):
                raise RuntimeError("baselines are timed on a CUDA device")
            if name == "eager":
                fn_model = model
            else:
                mode = None if name == "compile" else name.removeprefix("compile-")
                fn_model = torch.compile(model, mode=mode)
            run_inputs = clone_inputs(inputs)

            def call(m=fn_model, args=run_inputs):
                with torch.no_grad():
                    return m(*args)

            started = time.perf_counter()
            with lock.shared(f"{name} compile"):
                call()  # compiles (torch.compile) and warms up: GPU work, but not timed
                torch.cuda.synchronize(device)
            setup_s = time.perf_counter() - started
            flush_page_cache()  # before the exclusive phase, as for a candidate
            with lock.exclusive(f"{name} timing"):
                if timer is None:
                    timer = GpuTimer(device)
                result, _ = timer.time(call, trials=timing["trials"], budget_s=timing["budget_s"], flush_files=False)
                if name == "eager":
                    peak = peak_memory(device, call)
            result.setup_s = round(setup_s, 3)
            stats[name] = to_jsonable(result)
            # candidates' verdicts may be waiting for this one, not for the others
            channel.request("baseline", name=name, stats=stats[name], peak_memory_bytes=peak)
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            channel.request("baseline", name=name, error=errors[name])
    record = {"key": key, "stats": stats, "errors": errors, "peak_memory_bytes": peak,
              "flush_bytes": timer.flush_buffer.numel() * 4 if timer else None,
              "host_overhead_ms": timer.host_overhead_ms if timer else None}
    if cache_dir is not None and stats:
        save_baselines(cache_dir, key, record)
    record["cached"] = False
    return json.loads(json.dumps(record))
