"""anthropic:MODEL[@BASE_URL]: Anthropic's Messages API through the official anthropic SDK.

The SDK (2.x) speaks API version 2026-10-21, which has no sampling parameters: a temperature
is not sent (the API answers 400 to one); the first call that asks for one logs that at INFO."""

from __future__ import annotations

import logging
import time
from typing import Any

from kfoundry.llm.errors import LLMError
from kfoundry.llm.pricing import Pricing
from kfoundry.llm.provider import Provider
from kfoundry.llm.reply import LLMReply, Request
from kfoundry.llm.retry import RetryPolicy, call_with_retries
from kfoundry.llm.sdk_errors import classify
from kfoundry.redact import Redactor

ANTHROPIC_URL = "https://api.anthropic.com"
# The Messages API requires max_tokens; this is what we ask for when the caller does not say.
DEFAULT_MAX_TOKENS = 8192

log = logging.getLogger("kfoundry.llm")


class AnthropicProvider(Provider):
    def __init__(self, spec: str, model: str, *, api_key: str, base_url: str | None, timeout_s: float,
                 retry: RetryPolicy, concurrency: int = 4, pricing: Pricing | None = None) -> None:
        super().__init__(spec, model, concurrency=concurrency, base_url=base_url, pricing=pricing)
        import anthropic

        self._sdk = anthropic
        self._timeout_s = timeout_s
        self._retry = retry
        self._redact = Redactor([api_key])
        self._temperature_noted = False
        # The SDK sends the key as a bearer token; compatible servers and proxies written for
        # older SDKs read x-api-key, so they get that too.
        headers = {"x-api-key": api_key} if base_url else None
        self._client = anthropic.Anthropic(api_key=api_key, base_url=base_url or ANTHROPIC_URL,
                                           timeout=timeout_s, max_retries=0, default_headers=headers)

    def _complete(self, request: Request) -> LLMReply:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": [{"role": "user", "content": request.user}],
            # Given per call, so the SDK does not refuse large max_tokens without streaming.
            "timeout": self._timeout_s,
        }
        if request.system:
            kwargs["system"] = request.system
        if request.temperature is not None and not self._temperature_noted:
            self._temperature_noted = True
            log.info("%s: temperature is not sent (the Messages API version the SDK speaks has none)",
                     self.spec)
        started = time.monotonic()
        message, attempts = call_with_retries(
            lambda: self._client.messages.create(**kwargs),
            lambda exc: classify(exc, self._sdk, self._redact, self._timeout_s),
            self._retry, self.spec)
        if message.stop_reason == "refusal":
            raise LLMError("refused", f"{self.spec}: the model declined to answer")
        if message.stop_reason == "max_tokens":
            log.warning("%s: the reply was cut at the token limit (max_tokens=%s)", self.spec,
                        kwargs["max_tokens"])
        text = "".join(block.text for block in message.content or () if getattr(block, "type", "") == "text")
        usage = message.usage
        return self._reply(request, text, getattr(usage, "input_tokens", None),
                           getattr(usage, "output_tokens", None), started, attempts)
