"""The composer as an expert (no LLM) after the first population: the kernels it composed that the
first population did not take, one per turn, while it has one the search has not seen."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kfoundry.experts.base import Proposal, Step, Traits


@dataclass
class ComposerExpert:
    kernels: list[str]  # sources, in the composer's order
    is_known: Callable[[str], bool] = field(default=lambda source: False)
    name: str = "composer"
    traits: Traits = Traits(starts=True, min_parents=0, improves=False)

    async def propose(self, step: Step) -> Proposal:
        while self.kernels:
            source = self.kernels.pop(0)
            if not self.is_known(source):
                return Proposal(source, why=step.reason)
        return Proposal(None, why=step.reason)
