"""The run store (one SQLite file per run), resume, and a run's outputs.

The names below are imported on first use: `kfoundry --help` mounts `kfoundry.runs.report_cli`, which
must not load the store (and the LLM package with it)."""

from importlib import import_module
from typing import Any

_WHERE = {"RunStoreError": "kfoundry.runs.errors", "normalize_source": "kfoundry.source_identity",
          "source_hash": "kfoundry.source_identity", "random_state_from_json": "kfoundry.random_state",
          "random_state_to_json": "kfoundry.random_state", "SCHEMA_VERSION": "kfoundry.runs.schema",
          "RunStore": "kfoundry.runs.store"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'kfoundry.runs' has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)
