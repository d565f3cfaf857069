"""The Provider interface every LLM source implements."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from kfoundry.llm.reply import LLMReply, Request, check_request

if TYPE_CHECKING:
    from kfoundry.llm.pricing import Pricing


class Provider:
    """Something that answers a (system, user) prompt. complete() is synchronous and thread-safe;
    at most `concurrency` calls run at once per provider (callers beyond that wait)."""

    def __init__(self, spec: str, model: str, *, concurrency: int = 4, base_url: str | None = None,
                 pricing: Pricing | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self.spec = spec  # already free of keys
        self.model = model
        self.base_url = base_url
        self.concurrency = concurrency
        self._pricing = pricing
        self._slots = threading.BoundedSemaphore(concurrency)

    @property
    def pricing(self) -> Pricing:
        if self._pricing is None:
            from kfoundry.llm.pricing import Pricing

            self._pricing = Pricing.load(None)
        return self._pricing

    def complete(self, system: str, user: str, *, max_tokens: int | None = None,
                 temperature: float | None = None) -> LLMReply:
        check_request(max_tokens, temperature)
        request = Request(system, user, max_tokens, temperature)
        with self._slots:
            return self._complete(request)

    def _complete(self, request: Request) -> LLMReply:
        raise NotImplementedError

    def is_priced(self, pricing: Pricing) -> bool:
        """Whether this provider's replies will carry a known dollar cost."""
        return pricing.price(self.model, self.base_url) is not None

    def _reply(self, request: Request, text: str, input_tokens: int | None, output_tokens: int | None,
               started: float, attempts: int) -> LLMReply:
        cost = None
        if input_tokens is not None and output_tokens is not None:
            cost = self.pricing.cost(self.model, input_tokens, output_tokens, base_url=self.base_url)
        return LLMReply(text=text, provider=self.spec, model=self.model, input_tokens=input_tokens,
                        output_tokens=output_tokens, cost_usd=cost,
                        latency_s=time.monotonic() - started, attempts=attempts,
                        request_hash=request.hash)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"
