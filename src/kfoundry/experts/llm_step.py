"""One LLM step: the rendered prompts, the budget, the call, the reply parsed into a candidate source.
`kfoundry generate` and every LLM expert of a search take their steps through `ask`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass
class LLMStep:
    """What one call gave: the source (None on any failure), the reply, and why there is no source."""

    source: str | None
    prompt_hash: str
    reply: Any = None  # kfoundry.llm's LLMReply, when the provider answered
    reply_kind: str | None = None  # file or search_replace
    failure: str | None = None
    called: bool = False  # False: the budget was spent, nothing was sent

    def record(self, expert: str) -> dict[str, Any]:
        """The call as the run store keeps it (kfoundry.runs.RunStore.add_llm_call)."""
        return {"expert": expert, "reply": self.reply.to_dict() if self.reply is not None else None,
                "prompt_hash": self.prompt_hash, "failure": self.failure}


def prompt_hash(system: str, user: str) -> str:
    return hashlib.sha256(f"{system}\n\x00\n{user}".encode()).hexdigest()


def ask(llm: Any, budget: Any, system: str, user: str, parent_source: str | None) -> LLMStep:
    """Send (system, user) to `llm` unless `budget` is spent, charge the reply, and parse it; a SEARCH/
    REPLACE reply applies to `parent_source`."""
    from kfoundry.experts.replies import parse_reply
    from kfoundry.llm import LLMError

    step = LLMStep(source=None, prompt_hash=prompt_hash(system, user))
    if budget is not None and budget.exhausted:
        step.failure = "the LLM budget is spent"
        return step
    step.called = True
    try:
        reply = llm.complete(system, user)
    except LLMError as exc:
        step.failure = f"LLM call failed ({exc.reason}): {exc}"
        return step
    if budget is not None:
        budget.charge(reply)
    step.reply = reply
    parsed = parse_reply(reply.text, parent_source)
    step.reply_kind = parsed.kind
    step.source, step.failure = parsed.source, parsed.failure
    return step
