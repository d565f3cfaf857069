"""How a run's LLM is built, apart from its provider specs (a run keeps those in its search settings)
and its keys (never kept: they come from the environment or the config file's [keys] table)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class LLMSettings:
    llm_weights: list[float] = field(default_factory=list)  # of the providers in an ensemble
    llm_timeout: float = 600.0  # seconds per call (local models are slow)
    llm_retries: int = 4  # on rate limits, 5xx, connection errors and timeouts
    llm_concurrency: int = 4  # calls in flight at once, per provider
    budget_dollars: float | None = None
    budget_tokens: int | None = None
    pricing: str | None = None  # a TOML file of model prices that extends the shipped table
    record: str | None = None  # every exchange appended to this JSONL file

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LLMSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
