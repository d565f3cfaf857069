"""kfoundry doctor's job, run in a sandboxed worker started as an evaluation starts one: can it read every
entry of the parent's import path, import kfoundry's worker modules, torch and Triton, and start CUDA."""

from __future__ import annotations

import importlib
import os
import traceback
from typing import Any

from kfoundry.sandbox.probe import inside


def unreadable(entry: str) -> str | None:
    """Why this process cannot use an import path entry (list it, read a module in it), or None."""
    try:
        names = sorted(os.listdir(entry))
    except OSError as exc:
        return f"cannot list it ({exc.strerror or exc})"
    for name in names:
        path = os.path.join(entry, name)
        target = os.path.join(path, "__init__.py") if os.path.isdir(path) else path
        if not target.endswith(".py") or not os.path.isfile(target):
            continue
        try:
            with open(target, "rb") as f:
                f.read(1)
        except OSError as exc:
            return f"cannot read {target} ({exc.strerror or exc})"
        return None  # one module read: the entry's files are readable
    return None


def run_probe_job(job: dict[str, Any], channel) -> dict[str, Any]:
    channel.phase("load")
    entries = {entry: unreadable(entry) for entry in job.get("paths", [])}
    modules = {}
    for name in job.get("modules", []):
        try:
            importlib.import_module(name)
            modules[name] = None
        except BaseException as exc:  # noqa: BLE001 -- whatever an import raises is the answer
            modules[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    return {"entries": entries, "modules": modules, **inside(str(job.get("device", "cpu")).startswith("cuda"))}
