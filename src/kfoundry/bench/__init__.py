"""Suites of problems scored by a method: discovery, per-problem runs, metrics (correctness,
fast_p, geometric-mean speedups), bench.json / bench.csv / bench.html, and `kfoundry bench`.

The names below are imported on first use: `kfoundry --help` mounts `kfoundry.bench.cli`, which must
not import the runner (and torch with it)."""

from importlib import import_module
from typing import Any

_WHERE = {"summarize": "metrics", "BenchReport": "report", "run_bench": "runner", "METHODS": "settings",
          "BenchSettings": "settings", "Suite": "suite", "SuiteProblem": "suite", "discover": "suite"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'kfoundry.bench' has no attribute {name!r}")
    return getattr(import_module(f"kfoundry.bench.{_WHERE[name]}"), name)
