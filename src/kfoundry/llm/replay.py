"""replay:FILE.jsonl: answers recorded earlier (see record.py), matched by request hash, else the
next unused record in file order. Replies carry the recorded usage and cost, so a replayed run
makes the same budget decisions as the recorded one."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.llm.errors import LLMError
from kfoundry.llm.provider import Provider
from kfoundry.llm.reply import LLMReply, Request

log = logging.getLogger("kfoundry.llm")


def read_records(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read the replay file {path}: {exc.strerror or exc}") from None
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise UsageError(f"{path}:{number}: not an LLM record (no \"text\")")
        records.append(record)
    return records


class ReplayProvider(Provider):
    def __init__(self, spec: str, path: Path, *, concurrency: int = 4) -> None:
        self.path = Path(path)
        self._records = read_records(self.path)
        model = self._records[0].get("model", "replay") if self._records else "replay"
        super().__init__(spec, str(model), concurrency=concurrency)
        self._by_hash: dict[str, deque[int]] = defaultdict(deque)
        for index, record in enumerate(self._records):
            if record.get("request_hash"):
                self._by_hash[record["request_hash"]].append(index)
        self._used = [False] * len(self._records)
        self._next = 0
        self._lock = threading.Lock()

    def is_priced(self, pricing: Any) -> bool:
        # replies carry the recorded cost: priced when every record has one (a record of an unpriced model,
        # `"cost_usd": null`, would reply with an unknown cost, which a dollar budget cannot count)
        return all(record.get("cost_usd") is not None for record in self._records)

    def _take(self, request_hash: str) -> int | None:
        with self._lock:
            matches = self._by_hash.get(request_hash)
            while matches:
                index = matches.popleft()
                if not self._used[index]:
                    self._used[index] = True
                    return index
            while self._next < len(self._records) and self._used[self._next]:
                self._next += 1
            if self._next == len(self._records):
                return None
            self._used[self._next] = True
            log.info("%s: no record for request %s; using record %d in file order",
                     self.spec, request_hash[:12], self._next + 1)
            return self._next

    def _complete(self, request: Request) -> LLMReply:
        started = time.monotonic()
        index = self._take(request.hash)
        if index is None:
            raise LLMError("replay_miss", f"{self.spec}: all {len(self._records)} recorded replies are used")
        record = self._records[index]
        usage = record.get("usage") or {}
        return LLMReply(text=record["text"], provider=self.spec, model=str(record.get("model", self.model)),
                        input_tokens=usage.get("input_tokens"), output_tokens=usage.get("output_tokens"),
                        cost_usd=record.get("cost_usd"), latency_s=time.monotonic() - started,
                        attempts=1, request_hash=request.hash)
