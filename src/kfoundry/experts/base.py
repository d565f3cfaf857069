"""What every expert is to the search: its traits, and `propose(step) -> Proposal`.

The search loop and the router ask an expert for its traits, never for its name: which experts write a
first kernel, which fix a failing parent, which improve a working one, which are drawn when the search
stalls, how many parents one is shown. An expert's own record of a proposal (the tuner's changes, the
LLM call with its tokens and cost) travels with the proposal to whoever stores the candidate.

This module imports nothing of the rest of kfoundry, so that `kfoundry.search` can use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

# what an expert does with a failing parent
FIXES = "fixes"  # reads the failure's diagnosis and fixes it (an LLM's repair)
RETRIES = "retries"  # tries other settings of the same kernel (the tuner: other tiles may compile)


@dataclass(frozen=True)
class Traits:
    starts: bool = False  # writes a kernel with no parent (a population's first)
    min_parents: int = 1  # parents it is shown (0: none); above 1 it combines them, and all are its parents
    needs_llm: bool = False
    improves: bool = True  # drawn to improve a working parent (the diagnosis's focus, exploration, stalls)
    repair: str = ""  # FIXES, RETRIES or "": what it does with a failing parent
    changes_approach: bool = False  # preferred when the search makes no progress
    small_edits: bool = False  # its children are near their parent by design: no near-duplicate check
    focus: tuple[str, ...] = ()  # the diagnosis focuses it answers (kfoundry.types.Diagnosis.focus)
    # asked when the chosen expert offers nothing new for a working parent: it has an untried candidate while
    # its space lasts, so the budget is spent (and it may say how much of that space it tried: `coverage()`)
    fallback: bool = False


@dataclass
class Step:
    """One child to write: the parent (None for a first kernel), the island's other elites, and why this
    expert was chosen. `parent` and `others` are the search's individuals (source, status, fitness,
    diagnosis, and `parent_info`: what an expert is shown of a candidate it starts from)."""

    parent: Any = None
    others: list[Any] = field(default_factory=list)
    reason: str = ""
    island: int = 0  # the island the child is for, of `islands`: first kernels differ by island
    islands: int = 1


@dataclass
class Proposal:
    """What an expert made of one step. `source` None: nothing this time (the record may still say why,
    and an LLM call that gave no kernel is kept too)."""

    source: str | None
    parent_ids: list[str] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)  # {"changes", "summary"} or {"llm_call": {...}}
    why: str = ""


class Expert(Protocol):
    name: str
    traits: Traits

    async def propose(self, step: Step) -> Proposal:
        ...


def parents_of(traits: Traits, step: Step) -> list[Any]:
    """The individuals an expert with these traits starts from in this step."""
    if step.parent is None or traits.min_parents == 0:
        return []
    return [step.parent, *step.others] if traits.min_parents > 1 else [step.parent]
