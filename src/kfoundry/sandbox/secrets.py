"""Every secret value this process knows (API keys from the environment or kfoundry.toml's [keys]),
and their removal from text that came from a candidate: its output, its exception messages and
tracebacks reach diagnoses, LLM prompts, run records and logs."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from kfoundry.redact import Redactor
from kfoundry.sandbox.environment import looks_secret

MIN_LENGTH = 8  # shorter values ("1", "true") are not treated as secrets: replacing them would garble text
_registered: set[str] = set()


def register(value: str | None) -> None:
    """A secret read from somewhere other than the environment (the config file's [keys])."""
    if value and len(value) >= MIN_LENGTH:
        _registered.add(value)


def known() -> list[str]:
    values = set(_registered)
    values.update(v for k, v in os.environ.items() if looks_secret(k) and v and len(v) >= MIN_LENGTH)
    return sorted(values)


def scrub(text: str, values: list[str] | None = None, rewrite: dict[str, str] | None = None) -> str:
    """`text` with every secret value and anything shaped like a key masked (kfoundry.redact), and
    each key of `rewrite` replaced by its value (paths)."""
    return _scrub(text, Redactor(known() if values is None else values), rewrite)


def _scrub(text: str, redact: Redactor, rewrite: dict[str, str] | None) -> str:
    if text:
        text = redact(text)
    for old, new in (rewrite or {}).items():
        text = text.replace(old, new) if text else text
    return text


def scrub_tree(value: Any, values: list[str] | None = None, rewrite: dict[str, str] | None = None) -> Any:
    """Every string inside dicts, lists and dataclasses scrubbed, in place where the container allows."""
    return _scrub_tree(value, Redactor(known() if values is None else values), rewrite)


def _scrub_tree(value: Any, redact: Redactor, rewrite: dict[str, str] | None) -> Any:
    if isinstance(value, str):
        return _scrub(value, redact, rewrite)
    if isinstance(value, list):
        value[:] = [_scrub_tree(v, redact, rewrite) for v in value]
        return value
    if isinstance(value, tuple):
        return type(value)(_scrub_tree(v, redact, rewrite) for v in value)
    if isinstance(value, dict):
        for key in list(value):
            value[key] = _scrub_tree(value[key], redact, rewrite)
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _scrub_tree(old, redact, rewrite)
            if new is not old:  # a frozen record (kfoundry.types.ReferenceRounding) is scrubbed in place too
                object.__setattr__(value, f.name, new)
    return value
