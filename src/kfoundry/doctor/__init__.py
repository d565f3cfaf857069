"""`kfoundry doctor`: what holds on this machine before a run, each line ok or a problem with its fix.

- kfoundry.doctor.machine: versions, the GPUs with their free memory and who holds it, JAX's preallocation;
- kfoundry.doctor.import_path: whether the workers can read the import path (checked from the parent);
- kfoundry.doctor.worker_check: one real sandboxed worker (the sandbox's parts, its imports, CUDA in it);
- kfoundry.doctor.tiny_eval: one tiny evaluation end to end.

`preflight` is the cheap part (no worker, no evaluation), which optimize and bench run as they start: a
problem that may still work is a warning, one that certainly will not is an EnvironmentFault.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kfoundry.doctor.check import Check
from kfoundry.errors import EnvironmentFault

Progress = Callable[[str], None]


def preflight(device: str | None = None, sandbox: str = "on") -> list[Check]:
    """The checks that need no worker and no evaluation (a second or so). `device`: cpu leaves the GPUs out."""
    from kfoundry.doctor.import_path import check_import_path
    from kfoundry.doctor.machine import check_gpus, check_jax, check_versions, torch_cuda
    from kfoundry.gpu_usage import GpuUsage, gpu_usage

    checks = [check_versions()]
    if device != "cpu":
        usage = gpu_usage()
        checks += check_gpus(usage, torch_cuda(), device)
        checks.append(check_jax(usage))
    else:
        from kfoundry.doctor.machine import check_jax as jax

        checks.append(jax(GpuUsage()))  # no GPU in use: JAX has nothing of ours to take
    checks.append(check_import_path(sandbox))
    return checks


def stop_or_warn(checks: list[Check]) -> list[str]:
    """Raise the first certain failure as an EnvironmentFault; the other problems, as warnings."""
    for check in checks:
        if check.fatal and not check.ok:
            raise EnvironmentFault(f"{check.name}: {check.detail}", check.fix)
    return [f"{check.name}: {check.detail} (fix: {check.fix})" for check in checks if not check.ok]


def run_doctor(device: str | None = None, progress: Progress | None = None) -> list[Check]:
    """Every check, the cheap ones first; the worker and the evaluation on `device` (default: the first GPU
    where there is one, else the CPU)."""
    from kfoundry.doctor.tiny_eval import check_eval
    from kfoundry.doctor.worker_check import check_worker
    from kfoundry.evaluate.parent.options import resolve_device

    say = progress or (lambda message: None)
    say("versions, GPUs, JAX, the import path")
    resolved = resolve_device(device, "fp32")
    checks = preflight(resolved if device is not None else None)
    say(f"starting a sandboxed worker and evaluating the bundled problem on {resolved}")
    with ThreadPoolExecutor(1, thread_name_prefix="kfoundry-doctor") as pool:  # side by side: seconds apart
        worker = pool.submit(check_worker, resolved)
        evaluated = check_eval(resolved)
        checks += worker.result()
    checks.append(evaluated)
    return checks


__all__ = ["Check", "preflight", "run_doctor", "stop_or_warn"]
