"""A spending limit on LLM calls, in dollars and/or tokens."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.llm.pricing import Pricing
from kfoundry.llm.provider import Provider
from kfoundry.llm.reply import LLMReply


class Budget:
    """Charge every reply; `exhausted` turns true once either limit is reached. Thread-safe."""

    def __init__(self, dollars: float | None = None, tokens: int | None = None) -> None:
        if dollars is not None and not dollars > 0:
            raise UsageError(f"a dollar budget must be above 0, not {dollars}")
        if tokens is not None and not tokens > 0:
            raise UsageError(f"a token budget must be above 0, not {tokens}")
        self.dollars = dollars
        self.tokens = tokens
        self.spent_usd = 0.0
        self.spent_tokens = 0
        self.calls = 0
        self.unpriced_calls = 0  # replies whose cost is unknown (not counted in spent_usd)
        self._lock = threading.Lock()

    def check_start(self, providers: Iterable[Provider], pricing: Pricing) -> None:
        """Refuse a dollar budget that could not be enforced: some model has no price."""
        if self.dollars is None or self.tokens is not None:
            return
        unpriced = [p.spec for p in providers if not p.is_priced(pricing)]
        if unpriced:
            raise UsageError(
                f"a dollar budget needs a price for every model, and these have none: "
                f"{', '.join(unpriced)}. Add their prices to a pricing file (--pricing FILE: "
                f'[models] "MODEL" = {{ input = USD/Mtok, output = USD/Mtok }}) or also give a token budget.')

    def charge(self, reply: LLMReply) -> None:
        with self._lock:
            self.calls += 1
            self.spent_tokens += reply.total_tokens or 0
            if reply.cost_usd is None:
                self.unpriced_calls += 1
            else:
                self.spent_usd += reply.cost_usd

    @property
    def exhausted(self) -> bool:
        with self._lock:
            return ((self.dollars is not None and self.spent_usd >= self.dollars)
                    or (self.tokens is not None and self.spent_tokens >= self.tokens))

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {"dollars": self.dollars, "tokens": self.tokens, "spent_usd": self.spent_usd,
                    "spent_tokens": self.spent_tokens, "calls": self.calls,
                    "unpriced_calls": self.unpriced_calls}

    def __repr__(self) -> str:
        return f"Budget(dollars={self.dollars}, tokens={self.tokens})"
