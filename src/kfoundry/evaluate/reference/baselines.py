"""The on-disk cache of baseline timings (eager, torch.compile), keyed by everything that moves them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kfoundry.evaluate.shared.signed_cache import read_signed, write_signed
from kfoundry.evaluate.timing.gpu_timer import TIMING_METHOD_VERSION


def baseline_key(problem_hash: str, precision: str, eval_mode: bool, timing_trials: int, facts) -> str:
    """Everything that moves a baseline's timing: the problem (content and --set values), the GPU (name
    and UUID), the software, the precision and the timing method."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    parts = {
        "problem": problem_hash,  # content hash of the file and its --set values
        "device": facts.name,
        "uuid": facts.uuid,
        "torch": torch.__version__,
        "triton": triton_version,
        "precision": precision,
        "eval_mode": eval_mode,
        "timing_method": TIMING_METHOD_VERSION,
        "trials": timing_trials,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def _path(cache_dir: Path, key: str) -> Path:
    return cache_dir / "baselines" / f"{key}.json"


def load_baselines(cache_dir: Path, key: str) -> dict[str, Any] | None:
    """The cached record, or None (also when its signature fails: it is measured again)."""
    record = read_signed(cache_dir, _path(cache_dir, key))
    return record if isinstance(record, dict) and record.get("key") == key else None


def save_baselines(cache_dir: Path, key: str, record: dict[str, Any]) -> None:
    """The record saved with what an earlier job saved under the key and this one did not measure (a later job
    times baselines the first did not: reduce-overhead beside a best replayed from a CUDA graph)."""
    write_signed(cache_dir, _path(cache_dir, key), merged_records(load_baselines(cache_dir, key) or {}, record))


def merged_records(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """`later`, with the baselines `earlier` measured that it did not (a later figure or error wins)."""
    stats = {**(earlier.get("stats") or {}), **(later.get("stats") or {})}
    errors = {**{k: v for k, v in (earlier.get("errors") or {}).items() if k not in stats},
              **(later.get("errors") or {})}
    merged = dict(later, stats=stats, errors=errors)
    for name in ("peak_memory_bytes", "flush_bytes", "host_overhead_ms"):
        if merged.get(name) is None and earlier.get(name) is not None:
            merged[name] = earlier[name]
    return merged
