"""Records of the cache (baselines, device facts) signed with an HMAC, so a record nobody of ours wrote
is ignored and measured again: the speedups of every later run rest on the baselines.

The key is a random file in the cache folder, made on first use, readable by the user only. Only the
parent, the judge and the baseline process write the cache; a candidate's worker cannot reach the
folder at all where its sandbox's filesystem rules hold (kfoundry.sandbox.policy). Where they do not
(no Landlock), a candidate running as the same user could read the key too: evaluations say then
that the cache is unprotected.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

KEY_FILE = ".signing-key"


def _key(cache_dir: Path) -> bytes:
    path = cache_dir / KEY_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        pass
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_hex(32)
    tmp = path.with_name(f"{KEY_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    try:
        os.link(tmp, path)  # the first writer's key wins; a second process reads it
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return bytes.fromhex(path.read_text().strip())


def _digest(cache_dir: Path, record: Any) -> str:
    body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(_key(cache_dir), body, hashlib.sha256).hexdigest()


def write_signed(cache_dir: Path, path: Path, record: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"record": record, "hmac": _digest(cache_dir, record)}, indent=2))
    tmp.replace(path)


def read_signed(cache_dir: Path, path: Path) -> Any | None:
    """The record, or None when the file is missing, damaged, unsigned or signed with another key."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("hmac"), str) or "record" not in data:
        return None
    if not hmac.compare_digest(data["hmac"], _digest(cache_dir, data["record"])):
        return None
    return data["record"]
