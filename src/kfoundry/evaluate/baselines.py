"""The on-disk cache of baseline timings (eager, torch.compile), keyed by everything that moves them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kfoundry.evaluate.timing import TIMING_METHOD_VERSION


def baseline_key(job: dict[str, Any], facts) -> str:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    parts = {
        "problem": job["problem_hash"],  # content hash of the file and its --set values
        "device": facts.name,
        "uuid": facts.uuid,
        "torch": torch.__version__,
        "triton": triton_version,
        "precision": job["precision"],
        "eval_mode": job["eval_mode"],
        "timing_method": TIMING_METHOD_VERSION,
        "trials": job["timing"]["trials"],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def _path(cache_dir: Path, key: str) -> Path:
    return cache_dir / "baselines" / f"{key}.json"


def load_baselines(cache_dir: Path, key: str) -> dict[str, Any] | None:
    try:
        record = json.loads(_path(cache_dir, key).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return record if record.get("key") == key else None


def save_baselines(cache_dir: Path, key: str, record: dict[str, Any]) -> None:
    path = _path(cache_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    tmp.replace(path)
