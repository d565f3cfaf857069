"""The machine's software and GPUs, read without a CUDA context: torch's, Triton's and CUDA's versions, the
GPUs with their free memory and who holds it (NVML: kfoundry.gpu_usage), and whether JAX would take a GPU's
memory in a process that imports it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform

from kfoundry.doctor.check import Check, passed, problem
from kfoundry.evaluate.parent.environment_faults import GIB, OTHERS_MIN_BYTES, gpus_of, others_holding, our_pids
from kfoundry.gpu_usage import GpuUsage, gpu_usage

TORCH_INSTALL = "https://pytorch.org/get-started/locally/"


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_cuda() -> str | None:
    """The CUDA version torch was built with; None for a CPU build (or no torch). Imports torch, which is
    not touching the GPU."""
    try:
        import torch
    except Exception:  # noqa: BLE001 -- any failure to import is reported by check_versions
        return None
    return torch.version.cuda


def check_versions() -> Check:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 -- a broken torch fails in many ways
        return problem("versions", f"torch cannot be imported: {type(exc).__name__}: {exc}",
                       f"install torch ({TORCH_INSTALL})", fatal=True)
    triton = _version("triton") or _version("pytorch-triton")
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build"
    detail = (f"torch {torch.__version__} ({build}), Triton {triton or 'not installed'}, "
              f"Python {platform.python_version()}")
    if triton is None:
        return problem("versions", detail + ": Triton candidates cannot run",
                       "pip install triton (on a GPU, the version that matches torch)")
    return passed("versions", detail)


def check_gpus(usage: GpuUsage | None = None, cuda: str | None = None, device: str | None = None) -> list[Check]:
    """A line per GPU (`device`'s alone where it names one, cuda:N): its free memory and who holds the rest; a
    problem where other processes hold a part that matters, or where torch cannot use the GPUs at all."""
    usage = gpu_usage() if usage is None else usage
    if not usage.available or not usage.gpus:
        if cuda and os.path.exists("/dev/nvidiactl"):
            return [problem("gpus", f"this machine has an NVIDIA device, but its driver could not be read "
                                    f"({usage.reason or 'no GPU listed'})",
                            "check the driver with nvidia-smi; pip install nvidia-ml-py lets kfoundry read it")]
        return [passed("gpus", "no GPU: evaluations run on the CPU through Triton's interpreter "
                               "(verdicts, no timings)")]
    if not cuda:
        return [problem("gpus", f"{len(usage.gpus)} GPU(s) here, but torch is a CPU build: nothing runs on them",
                        f"install a CUDA build of torch ({TORCH_INSTALL})")]
    ours = our_pids()
    checks = []
    for gpu in gpus_of(device, usage) if device and device.startswith("cuda") else usage.gpus:
        name = f"gpu {gpu.index}"
        holders = "; ".join(p.describe() for p in gpu.processes) or "no process holds memory"
        detail = f"{gpu.describe()}; {holders} (from {usage.source})"
        others = others_holding([gpu], ours).held
        if others >= max(OTHERS_MIN_BYTES, gpu.total_bytes // 20):
            checks.append(problem(name, f"{detail}: other processes hold {others / GIB:.1f} GiB",
                                  "stop them, or evaluate on another GPU with --device cuda:N"))
        else:
            checks.append(passed(name, detail))
    return checks


def check_jax(usage: GpuUsage | None = None) -> Check:
    """JAX preallocates 75% of every visible GPU's memory in a process that imports it (a problem, a
    candidate, a library they use): found without importing it here."""
    spec = importlib.util.find_spec("jax")
    if spec is None:
        return passed("jax", "not installed: nothing preallocates GPU memory")
    usage = gpu_usage() if usage is None else usage
    if not usage.gpus:
        return passed("jax", "installed, and there is no GPU for it to take")
    value = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "")
    if value.strip().lower() in ("false", "0"):
        return passed("jax", f"installed, with XLA_PYTHON_CLIENT_PREALLOCATE={value}: it takes GPU memory as needed")
    where = spec.origin or "the import path"
    return problem("jax", f"JAX is installed ({where}) and XLA_PYTHON_CLIENT_PREALLOCATE is not false: any process "
                          "of an evaluation that imports it takes 75% of every visible GPU's memory at once",
                   "export XLA_PYTHON_CLIENT_PREALLOCATE=false before running kfoundry (its workers inherit it)")
