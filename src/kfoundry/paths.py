"""Where Kernel Foundry keeps what outlives one command."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$KFOUNDRY_CACHE_DIR, else $XDG_CACHE_HOME/kfoundry, else ~/.cache/kfoundry."""
    explicit = os.environ.get("KFOUNDRY_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kfoundry"
