"""The environment of every evaluation process (judge, baselines, candidate workers, compilers they
start): built from an allow-list of what Python, CUDA, the compilers and the tools need, never a
copy of ours with secrets filtered out (a key under an unexpected name would slip through)."""

from __future__ import annotations

import functools
import json
import os
import site
import subprocess
import sys
from collections.abc import Iterable, Mapping

ALLOWED = {
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL", "PWD",
    "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
    "CC", "CXX", "CUDAHOSTCXX", "CUDACXX", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "MAX_JOBS",
    "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING", "TORCH_CUDA_ARCH_LIST", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR",
    "TORCHINDUCTOR_COMPILE_THREADS", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "TRITON_CACHE_DIR", "TRITON_INTERPRET", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
    # JAX's GPU memory: without them a process that imports jax takes 75% of every GPU (kfoundry doctor)
    "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR",
}
ALLOWED_PREFIXES = ("LC_", "KFOUNDRY_WORKER_", "KFOUNDRY_GPU_", "KFOUNDRY_SANDBOX", "KFOUNDRY_MEMORY_GUARD",
                    "KFOUNDRY_WORK_DIR", "NCU_", "NV_COMPUTE_PROFILER_", "COMPUTE_SANITIZER_")
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
# JSON [{"path": ..., "site": bool}]: the parent's import path entries that a fresh interpreter with the
# evaluation environment lacks (added at run time, by .pth files of another prefix, its user site under a
# HOME the worker does not share); read when a process starts, fork servers included
SYS_PATH_ENV = "KFOUNDRY_SYS_PATH"
# JSON list: folders put first on a worker's sys.path, as `python problem.py` has its folder
IMPORT_PATH_ENV = "KFOUNDRY_WORKER_IMPORT_PATH"


def looks_secret(name: str) -> bool:
    return any(marker in name.upper() for marker in SECRET_MARKERS)


def evaluation_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowed variables of `base` (our environment), none of them named like a secret."""
    env = os.environ if base is None else base
    return {name: value for name, value in env.items()
            if (name in ALLOWED or name.startswith(ALLOWED_PREFIXES)) and not looks_secret(name)}


def _entry(path: str) -> str:
    return os.path.abspath(path or os.getcwd())


def _site_dirs() -> set[str]:
    """The site folders of this process (their .pth files matter), the user's included."""
    found = set(site.getsitepackages()) if hasattr(site, "getsitepackages") else set()
    if site.ENABLE_USER_SITE:
        found.add(site.getusersitepackages())
    return {_entry(path) for path in found}


@functools.lru_cache(maxsize=8)
def _fresh_sys_path(env: tuple[tuple[str, str], ...]) -> frozenset[str]:
    """sys.path of a fresh interpreter started with `env` (and a HOME of its own, as a worker's) in /, but
    for its first entry (its script's folder, or its working directory); empty when it cannot tell."""
    code = "import json, sys; print(json.dumps(sys.path[1:]))"
    try:
        done = subprocess.run([sys.executable, "-c", code], env={**dict(env), "HOME": "/nonexistent"}, cwd="/",
                              capture_output=True, text=True, timeout=60)
        return frozenset(_entry(path) for path in json.loads(done.stdout.strip().splitlines()[-1]))
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return frozenset()


def missing_entries(env: Mapping[str, str], leave_out: Iterable[str] = ()) -> list[dict]:
    """This process's import path entries that a fresh interpreter with `env` lacks (SYS_PATH_ENV's
    value), in their order, but for those in `leave_out` (problems' folders: each goes to its own
    workers only) and those that do not exist."""
    # what shapes sys.path, and what the interpreter may need to start at all
    shaping = tuple(sorted((k, v) for k, v in env.items() if k.startswith("PYTHON") or k == "LD_LIBRARY_PATH"))
    fresh = _fresh_sys_path(shaping)
    skip = {_entry(path) for path in leave_out}
    sites = _site_dirs()
    entries = dict.fromkeys(_entry(path) for path in sys.path if isinstance(path, str))
    return [{"path": path, "site": path in sites} for path in entries
            if path not in fresh and path not in skip and os.path.exists(path)]


def _json_list(text: str | None) -> list:
    try:
        value = json.loads(text or "[]")
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def extend_sys_path(env: Mapping[str, str] | None = None) -> None:
    """In an evaluation process, before it imports anything else: the parent's entries that it lacks
    (SYS_PATH_ENV, appended; a site folder through site.addsitedir, so that its .pth files count), then
    the problem's folder first (IMPORT_PATH_ENV). Safe to call again (a forked worker repeats its
    server's)."""
    env = os.environ if env is None else env
    for item in _json_list(env.get(SYS_PATH_ENV)):
        path = item.get("path") if isinstance(item, dict) else None
        if not isinstance(path, str) or path in sys.path:
            continue
        if item.get("site"):
            site.addsitedir(path)
        else:
            sys.path.append(path)
    folders = [path for path in _json_list(env.get(IMPORT_PATH_ENV)) if isinstance(path, str)]
    if folders and sys.path[:len(folders)] != folders:
        sys.path[:0] = folders
