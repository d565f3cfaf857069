"""The rows of the target compile (kfoundry.evaluate.worker.target_compile: a CPU verdict's kernels compiled for the
target GPU, about 2 CPU-seconds an evaluation in a child that imports torch and Triton), kept in the cache folder
by the parent, so that a candidate evaluated again (a resumed run, the library's and the user's seeds, another run
on the problem) is not compiled again.

A record is found by the candidate's exact source, as the parent copied it into the worker's folder, the target's
compute capability and the versions that make the binary (torch, Triton with its bundled ptxas, this file's
format); it holds the launches it was compiled for. The worker is given this source's records, uses the rows of
the one whose launches are its own, and compiles where none is. Only the parent writes the records, signed
(kfoundry.evaluate.shared.signed_cache) in a folder that candidates cannot reach: what a worker reports is filed
under its own source only, so a candidate can plant rows for no other; and only rows without an error (a timeout
may pass) are kept.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kfoundry.evaluate.shared.signed_cache import read_signed, write_signed

FOLDER = "target-compile"
FORMAT = 1  # of the rows target_compile.derive writes: a new field or meaning takes a new number


def _digest(value: Any) -> str:
    text = value if isinstance(value, bytes) else json.dumps(value, sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:32]


def _identity(capability: str, versions: Any) -> dict[str, Any]:
    return {"capability": capability, "versions": list(versions), "format": FORMAT}


def known(cache_dir: Path, source: bytes, capability: str, versions: Any) -> list[dict[str, Any]]:
    """The records of this source for this target and these versions: [{"launches", "rows"}] (most often none)."""
    identity, found = _identity(capability, versions), []
    for path in sorted((cache_dir / FOLDER).glob(f"{_digest(source)}-*.json")):
        record = read_signed(cache_dir, path)
        if isinstance(record, dict) and record.get("source") == _digest(source) and all(
                record.get(k) == v for k, v in identity.items()) and isinstance(record.get("rows"), list):
            found.append({"launches": record.get("launches"), "rows": record["rows"]})
    return found


def remember(cache_dir: Path, source: bytes, capability: str, versions: Any, launches: Any, rows: Any) -> None:
    """Keep the rows a worker compiled for these launches, where every one of them was compiled."""
    if not (isinstance(launches, dict) and isinstance(rows, list) and rows):
        return
    if not all(isinstance(row, dict) and "error" not in row for row in rows):
        return
    identity = _identity(capability, versions)
    record = {"source": _digest(source), **identity, "launches": launches, "rows": rows}
    path = cache_dir / FOLDER / f"{_digest(source)}-{_digest([launches, identity])}.json"
    try:
        write_signed(cache_dir, path, record)
    except OSError:  # a cache that cannot be written: the next evaluation compiles again
        pass
