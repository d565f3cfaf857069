"""Recording every exchange as one JSON line: the file replay:FILE reads back.

A line: {"format": "kfoundry-llm-record/1", "timestamp": ISO-8601 UTC, "provider": spec without
keys, "model", "request": {"system", "user", "max_tokens", "temperature"}, "request_hash",
"text", "usage": {"input_tokens", "output_tokens"}, "cost_usd", "latency_s", "attempts"}.
Only replies are recorded; failed calls raise and leave no line."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.llm.provider import Provider
from kfoundry.llm.reply import LLMReply, Request

RECORD_FORMAT = "kfoundry-llm-record/1"


def record_line(request: Request, reply: LLMReply) -> dict[str, Any]:
    return {
        "format": RECORD_FORMAT,
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "provider": reply.provider,
        "model": reply.model,
        "request": request.to_dict(),
        "request_hash": reply.request_hash,
        "text": reply.text,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
        "cost_usd": reply.cost_usd,
        "latency_s": round(reply.latency_s, 6),
        "attempts": reply.attempts,
    }


class RecordingProvider(Provider):
    """Wraps a provider; appends each of its exchanges to a JSONL file."""

    def __init__(self, inner: Provider, path: Path) -> None:
        # No slots of its own: the inner provider's limit is the one that counts.
        super().__init__(inner.spec, inner.model, concurrency=1, base_url=inner.base_url)
        self.inner = inner
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
        except OSError as exc:
            raise UsageError(f"cannot write the record file {self.path}: {exc.strerror or exc}") from None

    def complete(self, system: str, user: str, *, max_tokens: int | None = None,
                 temperature: float | None = None) -> LLMReply:
        reply = self.inner.complete(system, user, max_tokens=max_tokens, temperature=temperature)
        line = json.dumps(record_line(Request(system, user, max_tokens, temperature), reply),
                          ensure_ascii=False)
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
        return reply

    def is_priced(self, pricing: Any) -> bool:
        return self.inner.is_priced(pricing)

    def __repr__(self) -> str:
        return f"RecordingProvider({self.inner!r}, {str(self.path)!r})"


def record_provider(provider: Provider, path: Path | str) -> RecordingProvider:
    return RecordingProvider(provider, Path(path))
