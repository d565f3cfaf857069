"""Ray, optional: importing it with a clear error, and connecting to a cluster from a `--cluster` string."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import kfoundry
from kfoundry.errors import KFoundryError, UsageError

INSTALL_HINT = "pip install 'kfoundry[ray]'"
CLUSTER_HELP = "use ray (a local Ray instance, or the one RAY_ADDRESS names) or ray://HOST:PORT (an existing cluster)"
_ADDRESS = re.compile(r"ray://[^\s:/]+:\d{1,5}")


class ClusterError(KFoundryError):
    """The Ray cluster cannot be reached or cannot host the evaluation workers."""


def require_ray() -> ModuleType:
    """The `ray` module, or a UsageError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"--cluster ray needs Ray, which is not installed here: {INSTALL_HINT}") from None
    return ray


def cluster_address(cluster: str) -> str | None:
    """The address to give `ray.init`: None for "ray", the address itself for "ray://HOST:PORT"."""
    text = cluster.strip()
    if text == "ray":
        return None
    if _ADDRESS.fullmatch(text):
        return text
    raise UsageError(f"--cluster {cluster}: {CLUSTER_HELP}")


def code_runtime_env() -> dict[str, Any]:
    """Ship this kfoundry to the cluster's nodes, so that they run the driver's code (torch and triton must be
    installed there already)."""
    return {"py_modules": [str(Path(kfoundry.__file__).resolve().parent)], "excludes": ["__pycache__", "*.pyc"]}


def connect(cluster: str, **init_options: Any) -> ModuleType:
    """Connect this process to Ray ("ray": start or join a local instance; "ray://HOST:PORT": a remote
    cluster, with kfoundry's code shipped to it unless `runtime_env` is given). Already connected: nothing
    to do. `init_options` go to `ray.init` (num_cpus=..., runtime_env=...). Returns the ray module."""
    address = cluster_address(cluster)
    ray = require_ray()
    if ray.is_initialized():
        return ray
    if address is not None:
        init_options.setdefault("runtime_env", code_runtime_env())
    try:
        ray.init(address=address, **init_options)
    except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
        raise ClusterError(f"--cluster {cluster}: cannot connect to Ray: {exc}") from None
    return ray


def disconnect() -> None:
    """Leave Ray (a local instance this process started stops with it)."""
    ray = require_ray()
    if ray.is_initialized():
        ray.shutdown()
