"""One candidate in the search, and the normalized hash that tells identical code apart."""

from __future__ import annotations

import hashlib
import io
import tokenize
from dataclasses import dataclass, field
from typing import Any

from kfoundry.types import Diagnosis, to_jsonable


def _comment_starts(source: str) -> dict[int, int] | None:
    """Line (1-based) -> column where a Python comment begins; None when the source does not tokenize."""
    starts: dict[int, int] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                starts[token.start[0]] = token.start[1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return starts


def normalize_source(source: str) -> str:
    """The source without comments, blank lines and trailing spaces.

    Comments are found with the tokenizer so that a '#' inside a string (a CUDA `#include` in a
    load_inline source) is kept; code that does not tokenize loses only whole-line comments."""
    starts = _comment_starts(source)
    kept = []
    for number, line in enumerate(source.splitlines(), start=1):
        if starts is None:
            if line.lstrip().startswith("#"):
                continue
        elif number in starts:
            line = line[:starts[number]]
        line = line.rstrip()
        if line:
            kept.append(line)
    return "\n".join(kept)


def source_hash(source: str) -> str:
    return hashlib.sha256(normalize_source(source).encode()).hexdigest()


@dataclass
class Individual:
    id: str
    source: str
    source_hash: str = ""  # filled from `source` when left empty
    parent_ids: list[str] = field(default_factory=list)
    expert: str = ""
    island: int = 0  # where it was born; migrants keep it
    generation: int = 0
    status: str = "pending"  # "pending" until evaluated, then a verdict (kfoundry.types.STATUSES)
    fitness: float | None = None  # verified speedup over eager (1.0 for correct on CPU); None when failing
    diagnosis: Diagnosis | None = None
    features: dict[str, Any] = field(default_factory=dict)
    repair_tries: int = 0

    def __post_init__(self) -> None:
        if not self.source_hash:
            self.source_hash = source_hash(self.source)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.fitness is not None

    @property
    def failed(self) -> bool:
        return self.status not in ("ok", "pending")

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Individual:
        data = dict(data)
        diagnosis = data.pop("diagnosis", None)
        return cls(**data, diagnosis=Diagnosis.from_dict(diagnosis) if diagnosis else None)
