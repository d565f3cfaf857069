"""Keeping API keys out of everything we print, log, record or raise: the LLM providers' errors and
records, the run store, and what came from a candidate (kfoundry.sandbox.secrets). A leaf that imports
nothing of ours, so that evaluation processes can scrub text without loading the LLM stack."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
# Key shapes worth scrubbing even when we were not told the key (a server echoing one back,
# a key typed into a cmd: line): OpenAI/Anthropic/OpenRouter style "sk-...", and bearer tokens.
_KEY_PATTERNS = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}"),
)
_SECRET_PARAM = re.compile(r"(?i)key|token|secret|password|auth")


class Redactor:
    """Replaces the given secrets, and anything shaped like a key, with ***."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        # Longest first, so a key that contains another key is masked whole.
        self._secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        for pattern in _KEY_PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + MASK, text)
        return text


def scrub_url(url: str) -> str:
    """The URL without user:password@ and without key-like query parameters."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return Redactor()(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = urlencode([(k, MASK if _SECRET_PARAM.search(k) else v)
                       for k, v in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
