"""openai:MODEL[@BASE_URL]: OpenAI's Chat Completions API, or any server that speaks it (vLLM,
SGLang, Ollama, llama.cpp server, DeepSeek, OpenRouter), through the official openai SDK."""

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

OPENAI_URL = "https://api.openai.com/v1"

log = logging.getLogger("kfoundry.llm")


class OpenAIProvider(Provider):
    def __init__(self, spec: str, model: str, *, api_key: str, base_url: str | None, timeout_s: float,
                 retry: RetryPolicy, concurrency: int = 4, pricing: Pricing | None = None) -> None:
        super().__init__(spec, model, concurrency=concurrency, base_url=base_url, pricing=pricing)
        import openai

        self._sdk = openai
        self._timeout_s = timeout_s
        self._retry = retry
        self._redact = Redactor([api_key])
        # The official API wants max_completion_tokens (reasoning models reject max_tokens);
        # compatible servers know max_tokens best.
        self._tokens_param = "max_completion_tokens" if base_url is None else "max_tokens"
        # Everything explicit: no OPENAI_BASE_URL or SDK retries behind our back.
        self._client = openai.OpenAI(api_key=api_key, base_url=base_url or OPENAI_URL,
                                     timeout=timeout_s, max_retries=0)

    def _complete(self, request: Request) -> LLMReply:
        messages = [{"role": "user", "content": request.user}]
        if request.system:
            messages.insert(0, {"role": "system", "content": request.system})
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if request.max_tokens is not None:
            kwargs[self._tokens_param] = request.max_tokens
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        started = time.monotonic()
        response, attempts = call_with_retries(
            lambda: self._client.chat.completions.create(**kwargs),
            lambda exc: classify(exc, self._sdk, self._redact, self._timeout_s),
            self._retry, self.spec)
        if not response.choices:
            raise LLMError("server", f"{self.spec}: the reply has no choices")
        choice = response.choices[0]
        refusal = getattr(choice.message, "refusal", None)
        if refusal or choice.finish_reason == "content_filter":
            why = self._redact(str(refusal or "content filter"))[:300]
            raise LLMError("refused", f"{self.spec}: the model declined: {why}")
        if choice.finish_reason == "length":
            log.warning("%s: the reply was cut at the token limit (max_tokens=%s)", self.spec, request.max_tokens)
        usage = response.usage
        return self._reply(request, choice.message.content or "",
                           getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None),
                           started, attempts)
