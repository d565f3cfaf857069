"""Several providers as one: each call goes to a member picked at random by weight."""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Sequence
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.llm.provider import Provider
from kfoundry.llm.reply import LLMReply


def parse_weights(text: str) -> list[float]:
    """"2,1" -> [2.0, 1.0]."""
    try:
        weights = [float(part) for part in text.split(",")]
    except ValueError:
        raise UsageError(f"bad weights {text!r}: expected comma-separated numbers, like 2,1") from None
    _check(weights)
    return weights


def _check(weights: Sequence[float]) -> None:
    if any(not math.isfinite(w) or w < 0 for w in weights) or not any(w > 0 for w in weights):
        raise UsageError(f"bad weights {list(weights)}: each must be >= 0 and one above 0")


class Ensemble(Provider):
    def __init__(self, providers: list[Provider], weights: list[float] | None = None,
                 seed: int | None = None) -> None:
        if not providers:
            raise UsageError("an ensemble needs at least one provider")
        weights = [1.0] * len(providers) if weights is None else [float(w) for w in weights]
        if len(weights) != len(providers):
            raise UsageError(f"{len(weights)} weights for {len(providers)} providers")
        _check(weights)
        spec = "ensemble(" + ", ".join(f"{p.spec}*{w:g}" for p, w in zip(providers, weights)) + ")"
        super().__init__(spec, "ensemble", concurrency=1)
        self.providers = list(providers)
        self.weights = weights
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def pick(self) -> Provider:
        with self._lock:
            return self._rng.choices(self.providers, weights=self.weights)[0]

    def complete(self, system: str, user: str, *, max_tokens: int | None = None,
                 temperature: float | None = None) -> LLMReply:
        # The member's own concurrency limit applies; the reply names the member.
        return self.pick().complete(system, user, max_tokens=max_tokens, temperature=temperature)

    def is_priced(self, pricing: Any) -> bool:
        return all(p.is_priced(pricing) for p, w in zip(self.providers, self.weights) if w > 0)
