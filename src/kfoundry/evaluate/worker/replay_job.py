"""A replay of one candidate forward, for a tool wrapped around the worker (ncu, compute-sanitizer).

Builds ModelNew as the candidate job does (the reference's init seed, the trial's inputs from the
files the parent copied), runs forward once to compile and warm up, then once more between
cudaProfilerStart and cudaProfilerStop, so `ncu --profile-from-start off` sees that run alone.
Judging outputs is not its job: it says whether forward ran and what it returned.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from kfoundry import problem as problems
from kfoundry.evaluate.reference.reference_job import synchronize
from kfoundry.evaluate.worker.candidate_job import load_model_class
from kfoundry.evaluate.worker.failures import describe_exception


def _shapes(value: Any) -> list:
    if isinstance(value, torch.Tensor):
        return [list(value.shape)]
    if isinstance(value, (list, tuple)):
        return [shape for item in value for shape in _shapes(item)]
    if isinstance(value, dict):
        return [shape for item in value.values() for shape in _shapes(item)]
    return []


def run_replay_job(job: dict[str, Any], channel) -> dict[str, Any]:
    path, device = job["candidate_path"], job["device"]
    workdir = Path.cwd()
    channel.phase("load")
    source = Path(path).read_text(encoding="utf-8")
    model_class, failure = load_model_class(path, source, job.get("overrides"))
    if failure is not None:
        return failure

    channel.phase("init")
    try:
        init_inputs = torch.load(workdir / "init_inputs.pt", weights_only=False)
        model = problems.build_model(model_class, init_inputs, job["init_seed"], problems.torch_dtype(job["precision"]),
                                     device, job["eval_mode"])
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x
                  for x in torch.load(workdir / "inputs_0.pt", weights_only=False)]
    except BaseException as exc:
        return describe_exception(exc, path, "init")

    def forward() -> Any:
        problems.seed_everything(job["seed"])
        with torch.no_grad():
            return model(*inputs)

    phase = "compile"
    channel.phase(phase)
    try:
        forward()
        synchronize(device)
        phase = "replay"
        channel.phase(phase)
        cuda = device.startswith("cuda")
        if cuda:
            torch.cuda.cudart().cudaProfilerStart()
        try:
            out = forward()
            synchronize(device)
        finally:
            if cuda:
                torch.cuda.cudart().cudaProfilerStop()
    except BaseException as exc:
        return describe_exception(exc, path, "compile" if phase == "compile" else "correctness")
    return {"status": "ok", "message": "forward ran twice (warm-up, then the profiled run)", "outputs": _shapes(out)}
