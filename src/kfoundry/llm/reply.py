"""What goes into an LLM call (Request) and what comes back (LLMReply)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Request:
    """The model-independent part of a call: the same request to two providers hashes the same."""

    system: str
    user: str
    max_tokens: int | None = None
    temperature: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def hash(self) -> str:
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class LLMReply:
    text: str
    provider: str  # the provider spec, without any key
    model: str
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None  # None: unknown (an unpriced model), never a guessed 0
    latency_s: float  # wall time of the whole call, retries and their waits included
    attempts: int
    request_hash: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def total_tokens(self) -> int | None:
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)


def check_request(max_tokens: int | None, temperature: float | None) -> None:
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise ValueError(f"max_tokens must be a positive int, not {max_tokens!r}")
    if temperature is not None and not (isinstance(temperature, (int, float)) and temperature >= 0):
        raise ValueError(f"temperature must be a number >= 0, not {temperature!r}")
