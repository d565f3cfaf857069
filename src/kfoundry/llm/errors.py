"""The one error an LLM call raises, with a machine-readable reason."""

from __future__ import annotations

from kfoundry.errors import KFoundryError

REASONS = ("timeout", "rate_limit", "server", "connection", "client", "refused", "replay_miss",
           "command_failed")


class LLMError(KFoundryError):
    """An LLM call failed for good (after any retries). `reason` is one of REASONS; the message says
    which provider, what happened and how often it was tried. Messages never hold an API key."""

    def __init__(self, reason: str, message: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown LLMError reason {reason!r}")
        super().__init__(message)
        self.reason = reason

    def __repr__(self) -> str:
        return f"LLMError({self.reason!r}, {str(self)!r})"
