"""Where Kernel Foundry keeps what outlives one command."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def cache_dir() -> Path:
    """$KFOUNDRY_CACHE_DIR, else $XDG_CACHE_HOME/kfoundry, else ~/.cache/kfoundry."""
    explicit = os.environ.get("KFOUNDRY_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kfoundry"


def inside(path: str, roots: Iterable[str]) -> bool:
    """Whether `path` is one of `roots` or lies below one, symbolic links resolved (empty roots skipped)."""
    real = os.path.realpath(path)
    for root in roots:
        if root:
            base = os.path.realpath(root)
            if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
                return True
    return False
