"""The environment of every evaluation process (judge, baselines, candidate workers, compilers they
start): built from an allow-list of what Python, CUDA, the compilers and the tools need, never a
copy of ours with secrets filtered out (a key under an unexpected name would slip through)."""

from __future__ import annotations

import os
from collections.abc import Mapping

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
}
ALLOWED_PREFIXES = ("LC_", "KFOUNDRY_WORKER_", "KFOUNDRY_GPU_", "KFOUNDRY_SANDBOX", "KFOUNDRY_MEMORY_GUARD",
                    "KFOUNDRY_WORK_DIR", "NCU_", "NV_COMPUTE_PROFILER_", "COMPUTE_SANITIZER_")
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")


def looks_secret(name: str) -> bool:
    return any(marker in name.upper() for marker in SECRET_MARKERS)


def evaluation_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowed variables of `base` (our environment), none of them named like a secret."""
    env = os.environ if base is None else base
    return {name: value for name, value in env.items()
            if (name in ALLOWED or name.startswith(ALLOWED_PREFIXES)) and not looks_secret(name)}
