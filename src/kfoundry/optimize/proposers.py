"""Who writes a child: the tuner (no LLM) or an LLM expert. Called by the search loop with the
parent, its inspirations and the expert the router chose; returns a candidate source or None."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kfoundry.experts import EXPERTS, PromptContext, parse_reply, render
from kfoundry.experts.tuner import PRECISION_NAME, precision_variants, tune, tuning_record
from kfoundry.optimize.restore import parent_info
from kfoundry.runs import RunStore
from kfoundry.runs.hashing import source_hash
from kfoundry.search.individual import Individual
from kfoundry.types import DeviceFacts

TUNER_TRIES = 6  # variants asked of the tuner at once: the first one not seen before is taken
PRECISION_SHARE = 0.25  # of the tuner's turns on a parent that spells a dot precision: switch it


class Proposer:
    def __init__(self, *, store: RunStore, context: PromptContext, device: DeviceFacts | None,
                 evaluations: dict[str, dict[str, Any]], is_known: Callable[[str], bool], seed: int,
                 llm: Any = None, budget: Any = None, preferred: dict[str, int] | None = None,
                 prompts_dir: Path | None = None):
        self.store = store
        self.context = context  # problem, device, rules and retrieved experience; parents vary per call
        self.device = device
        self.evaluations = evaluations  # candidate id -> its stored evaluation dict
        self.is_known = is_known  # source hash -> already in the search
        self.llm = llm
        self.budget = budget
        self.preferred = preferred or {}
        self.prompts_dir = prompts_dir
        self.rng = random.Random(seed + 1)
        self.tuned: dict[str, dict[str, Any]] = {}  # source hash -> the tuner's changes
        self.composed: list[str] = []  # the composer's kernels the first population did not take
        self._calls: dict[str, dict[str, Any]] = {}  # source hash -> the LLM call that wrote it
        self._prompts = len(list(prompts_dir.glob("*.md"))) if prompts_dir is not None and prompts_dir.is_dir() else 0

    async def __call__(self, parent: Individual | None, others: list[Individual], expert: str) -> str | None:
        if expert == "tuner":
            return self._tune(parent)
        if expert == "composer":
            return self._next_composed()
        if expert in EXPERTS:
            return await self._ask(parent, others, expert)
        raise ValueError(f"no proposer for expert {expert!r}")

    # -- the tuner ------------------------------------------------------------------------------

    def _tune(self, parent: Individual | None) -> str | None:
        if parent is None:
            return None
        switched = precision_variants(parent.source)
        remembered = (self.preferred or {}).get(PRECISION_NAME) if isinstance(self.preferred, dict) else None
        first = [v for v in switched if v.changes[PRECISION_NAME][1] == remembered]
        if switched and (first or self.rng.random() < PRECISION_SHARE):
            switched = first + [v for v in self.rng.sample(switched, len(switched)) if v not in first]
        else:
            switched = []
        def retuned():  # a generator: the tunables are read only when no precision switch is new
            yield from tune(parent.source, self.rng, device=self.device, n=TUNER_TRIES, preferred=self.preferred)

        for variant in itertools.chain(switched, retuned()):
            digest = source_hash(variant.source)
            if not self.is_known(digest):
                self.tuned[digest] = {"changes": tuning_record(variant.changes), "summary": variant.summary}
                return variant.source
        return None

    def _next_composed(self) -> str | None:
        while self.composed:
            source = self.composed.pop(0)
            if not self.is_known(source_hash(source)):
                return source
        return None

    # -- LLM experts ----------------------------------------------------------------------------

    def _prompt_file(self, expert: str, system: str, user: str) -> None:
        if self.prompts_dir is None:
            return
        self._prompts += 1
        self.prompts_dir.mkdir(parents=True, exist_ok=True)
        path = self.prompts_dir / f"{self._prompts:04d}_{expert}.md"
        path.write_text(f"# system\n\n{system}\n\n# user\n\n{user}\n", encoding="utf-8")

    async def _ask(self, parent: Individual | None, others: list[Individual], expert: str) -> str | None:
        from kfoundry.llm import LLMError

        if self.llm is None:
            return None
        shown = [parent, *others] if expert == "crossover" and parent is not None else [parent] if parent else []
        context = PromptContext(**{**self.context.__dict__, "parents": [
            parent_info(p, (self.evaluations.get(p.id) or {}).get("evaluation")) for p in shown]})
        system, user = render(expert, context)
        self._prompt_file(expert, system, user)
        prompt_hash = hashlib.sha256(f"{system}\n\x00\n{user}".encode()).hexdigest()
        if self.budget is not None and self.budget.exhausted:
            return None
        try:
            reply = await asyncio.to_thread(self.llm.complete, system, user)
        except LLMError as exc:
            self.store.add_llm_call(None, expert, None, prompt_hash, failure=f"{exc.reason}: {exc}")
            return None
        if self.budget is not None:
            self.budget.charge(reply)
        parsed = parse_reply(reply.text, parent.source if parent is not None else None)
        if parsed.source is None:
            self.store.add_llm_call(None, expert, reply.to_dict(), prompt_hash, failure=parsed.failure)
            return None
        self._calls[source_hash(parsed.source)] = {"expert": expert, "reply": reply.to_dict(),
                                                   "prompt_hash": prompt_hash}
        return parsed.source

    def claim_call(self, digest: str, candidate_id: int | None) -> None:
        """Store the LLM call that wrote this source, now that its candidate has an id (or not,
        when the source turned out a duplicate)."""
        call = self._calls.pop(digest, None)
        if call is not None:
            self.store.add_llm_call(candidate_id, call["expert"], call["reply"], call["prompt_hash"])

    def flush_calls(self) -> None:
        """LLM calls whose source never became a candidate (a duplicate): stored without one."""
        for digest in list(self._calls):
            self.claim_call(digest, None)

    def state(self) -> list:
        version, internal, gauss = self.rng.getstate()
        return [version, list(internal), gauss]

    def restore(self, data: list | None) -> None:
        if data:
            self.rng.setstate((data[0], tuple(data[1]), data[2]))
