"""One candidate in the search, and the normalized hash that tells identical code apart."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kfoundry.source_identity import normalize_source, source_hash
from kfoundry.types import Diagnosis, to_jsonable

__all__ = ["Individual", "normalize_source", "source_hash"]


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
    roofline: float | None = None  # fraction of the roofline reached, when timed on a GPU
    record: dict[str, Any] = field(default_factory=dict)  # its expert's record of the proposal (experts.base)
    parent_info: Any = None  # what an expert is shown of it as a parent (from its Outcome; not stored)

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
        data = to_jsonable(self)
        data.pop("parent_info", None)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Individual:
        data = dict(data)
        data.pop("parent_info", None)
        diagnosis = data.pop("diagnosis", None)
        return cls(**data, diagnosis=Diagnosis.from_dict(diagnosis) if diagnosis else None)
