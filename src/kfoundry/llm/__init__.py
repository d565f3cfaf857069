"""LLM providers: OpenAI(-compatible), Anthropic, a shell command, record and replay; retries,
tokens, cost and budgets. The SDKs are imported only when such a provider is made.

The names below are imported on first use, so that importing a light submodule (kfoundry.llm.settings,
kfoundry.llm.cost_text, which the configuration and the progress panel need) does not load the
providers, the retry policy and tenacity with them: `kfoundry eval` and its evaluation processes use no LLM."""

from importlib import import_module
from typing import Any

_WHERE = {
    "ACCEPTED_FORMS": "specs", "REASONS": "errors", "Budget": "budget", "Ensemble": "ensemble",
    "LLMError": "errors", "LLMReply": "reply", "Price": "pricing", "Pricing": "pricing", "Provider": "provider",
    "RecordingProvider": "record", "Request": "reply", "RetryPolicy": "retry", "make_provider": "specs",
    "parse_spec": "specs", "parse_weights": "ensemble", "record_provider": "record",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'kfoundry.llm' has no attribute {name!r}")
    value = getattr(import_module(f"kfoundry.llm.{_WHERE[name]}"), name)
    globals()[name] = value  # the next lookup is a plain one
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
