"""Mapping the openai and anthropic SDKs' exceptions (same class names in both) to our Failures."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from kfoundry.llm.retry import Failure, parse_retry_after
from kfoundry.redact import Redactor

_MAX_DETAIL = 300


def _server_message(body: Any) -> str | None:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if body.get("message"):
            return str(body["message"])
    if isinstance(body, str) and body.strip():
        return body
    return None


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_DETAIL else text[:_MAX_DETAIL] + "…"


def classify(exc: Exception, sdk: ModuleType, redact: Redactor, timeout_s: float) -> Failure | None:
    if isinstance(exc, sdk.APITimeoutError):
        return Failure("timeout", True, f"no reply within {timeout_s:g} s")
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        why = f": {_short(str(cause))}" if cause is not None and str(cause) else ""
        return Failure("connection", True, redact(f"cannot connect{why}"))
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        said = _server_message(exc.body) or exc.message or ""
        detail = redact(_short(f"HTTP {status}: {said}" if said else f"HTTP {status}"))
        if status == 429:
            return Failure("rate_limit", True, detail, parse_retry_after(exc.response.headers))
        if status == 408:
            return Failure("timeout", True, detail)
        if status >= 500:
            return Failure("server", True, detail, parse_retry_after(exc.response.headers))
        if status in (401, 403):
            detail += " (check the API key)"
        return Failure("client", False, detail)
    if isinstance(exc, sdk.APIResponseValidationError):
        return Failure("server", False, redact(_short(f"malformed reply: {exc.message}")))
    base = getattr(sdk, "OpenAIError", None) or getattr(sdk, "AnthropicError", None)
    if base is not None and isinstance(exc, base):
        return Failure("client", False, redact(_short(str(exc))))
    return None
