"""The experience library: kernels, insights and recorded steps that persist across runs, and retrieval
of the ones that fit a problem (signature similarity plus BM25).

The names below are imported on first use: `kfoundry --help` mounts `kfoundry.library.cli`, which must
not load the store (and numpy with it)."""

from importlib import import_module
from typing import Any

_WHERE = {"Library": "store", "LibraryError": "errors", "default_path": "store"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'kfoundry.library' has no attribute {name!r}")
    return getattr(import_module(f"kfoundry.library.{_WHERE[name]}"), name)
