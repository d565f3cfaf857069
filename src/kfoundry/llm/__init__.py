"""LLM providers: OpenAI(-compatible), Anthropic, a shell command, record and replay; retries,
tokens, cost and budgets. The SDKs are imported only when such a provider is made."""

from kfoundry.llm.budget import Budget
from kfoundry.llm.ensemble import Ensemble, parse_weights
from kfoundry.llm.errors import REASONS, LLMError
from kfoundry.llm.pricing import Price, Pricing
from kfoundry.llm.provider import Provider
from kfoundry.llm.record import RecordingProvider, record_provider
from kfoundry.llm.reply import LLMReply, Request
from kfoundry.llm.retry import RetryPolicy
from kfoundry.llm.specs import ACCEPTED_FORMS, make_provider, parse_spec

__all__ = [
    "ACCEPTED_FORMS", "REASONS", "Budget", "Ensemble", "LLMError", "LLMReply", "Price", "Pricing",
    "Provider", "RecordingProvider", "Request", "RetryPolicy", "make_provider", "parse_spec",
    "parse_weights", "record_provider",
]
