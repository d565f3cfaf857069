"""An LLM expert in a search: its prompt (kfoundry.experts.llm_experts) rendered for the step's parents,
one LLM step (kfoundry.experts.llm_step), and the call kept in the proposal's record."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kfoundry.experts.base import Proposal, Step, Traits, parents_of
from kfoundry.experts.context import ParentInfo, PromptContext
from kfoundry.experts.llm_experts import ExpertPrompt, render
from kfoundry.experts.llm_step import ask
from kfoundry.experts.strategies import assignment


class PromptLog:
    """Every prompt a run sent, one numbered markdown file each (the run's prompts/ folder), and the LLM's reply
    to it under the same name in replies/ beside it (prompts/0007_memory.md, replies/0007_memory.md: markdown,
    as the replies are); a call that got no reply (it failed, or the budget was spent) leaves no reply file.
    Numbering goes on from the prompt files already there, so a resumed run adds to them."""

    def __init__(self, folder: Path | None, replies: Path | None = None) -> None:
        self.folder = folder
        self.replies = replies if replies is not None or folder is None else folder.parent / "replies"
        self._count = len(list(folder.glob("*.md"))) if folder is not None and folder.is_dir() else 0
        self._lock = threading.Lock()

    def write(self, expert: str, system: str, user: str) -> str | None:
        """Write one prompt; returns its name (for write_reply), None when there is no folder."""
        if self.folder is None:
            return None
        with self._lock:
            self._count += 1
            number = self._count
        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"{number:04d}_{expert}"
        (self.folder / f"{name}.md").write_text(f"# system\n\n{system}\n\n# user\n\n{user}\n", encoding="utf-8")
        return name

    def write_reply(self, name: str | None, text: str) -> None:
        """The reply to the prompt `write` named `name`, verbatim."""
        if name is None or self.replies is None:
            return
        self.replies.mkdir(parents=True, exist_ok=True)
        (self.replies / f"{name}.md").write_text(text, encoding="utf-8")


@dataclass
class LLMExpert:
    prompt: ExpertPrompt
    context: PromptContext  # problem, device, rules and retrieved experience; the parents vary per step
    llm: Any
    budget: Any = None
    log: PromptLog | None = None
    # requests so far per parent set (or island, for a first kernel): a prompt never repeats another blindly
    asked: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.prompt.name

    @property
    def traits(self) -> Traits:
        return self.prompt.traits

    async def propose(self, step: Step) -> Proposal:
        parents = parents_of(self.traits, step)
        shown = [p.parent_info if isinstance(p.parent_info, ParentInfo)
                 else ParentInfo(source=p.source, path=f"candidate {p.id}", status=p.status) for p in parents]
        context = replace(self.context, parents=shown)
        if self.traits.starts and not parents:  # a first kernel: this island's own strategy
            context.strategy, context.other_strategies = assignment(context.problem_class, step.island, step.islands,
                                                                    context.facts)
        context.attempt = self._attempt(parents, step)
        system, user = render(self.name, context)
        logged = self.log.write(self.name, system, user) if self.log is not None else None
        result = await asyncio.to_thread(ask, self.llm, self.budget, system, user,
                                         step.parent.source if step.parent is not None else None)
        if self.log is not None and result.reply is not None:
            self.log.write_reply(logged, result.reply.text)
        record = {"llm_call": result.record(self.name)} if result.called else {}
        if context.strategy is not None and result.called:
            record["strategy"] = context.strategy.name
        return Proposal(result.source, [p.id for p in parents], record, why=step.reason)

    def _attempt(self, parents: list[Any], step: Step) -> str:
        key = ",".join(str(p.id) for p in parents) or f"island {step.island}"
        n = self.asked[key] = self.asked.get(key, 0) + 1
        failing = bool(parents) and getattr(parents[0], "status", "ok") not in ("ok", "pending")
        return attempt_text(self.name, n, bool(parents), failing, step.island, step.reason)


def attempt_text(expert: str, n: int, has_parents: bool, failing: bool, island: int = 0, reason: str = "") -> str:
    """Which request a prompt is, said to the model: the first, or the n-th on the same parents (so it varies, or,
    on a failing parent, fixes differently), and why the search asked for it."""
    what = "this parent" if has_parents else f"island {island}'s first kernel"
    if n == 1:
        text = f"the first request to the {expert} expert for {what}"
    elif failing:
        text = (f"retry {n} on this failing parent: {n - 1} earlier repair(s) of it came back as other candidates "
                "(judged apart); write a different fix for the failure its verdict names")
    else:
        text = (f"sample {n} of the {expert} expert on {what}: {n - 1} earlier sample(s) took their own route; take "
                "another (other tiles, another loop order or fusion, another formulation)")
    return text + (f". Why this step: {reason}" if reason else "")
