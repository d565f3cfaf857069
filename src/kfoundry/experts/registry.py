"""The experts a search can enable, each built from one `Setup`, in one order (the router draws in it).

An expert is added with `register(name, factory)`: the factory takes the Setup and returns an object
with `name`, `traits` and `propose(step)` (kfoundry.experts.base.Expert), or None where it cannot act
in this run (the composer with no kernel left over). Nothing else names it: the router and the loop
read its traits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.experts.base import Expert


@dataclass
class Setup:
    """What the experts of one run are built from."""

    context: Any = None  # kfoundry.experts.PromptContext: problem, device, rules, retrieved experience
    llm: Any = None  # a kfoundry.llm provider; None: the LLM experts are not enabled
    budget: Any = None
    device: Any = None  # kfoundry.types.DeviceFacts
    seed: int = 0
    is_known: Callable[[str], bool] = field(default=lambda source: False)  # source -> seen in this search
    composed: list[str] = field(default_factory=list)  # the composer's kernels the first population left
    preferred: dict[str, int] = field(default_factory=dict)  # the tuner's settings that helped before
    prompts_dir: Path | None = None
    space: Any = None  # kfoundry.experts.composer.genome.GenomeSpace: the composer's genomes for this problem
    move_gains: dict[str, float] = field(default_factory=dict)  # genome move -> its gain on similar problems
    elites: Callable[[], list[Any]] = field(default=lambda: [])  # the best individual of every island
    _log: Any = field(default=None, init=False, repr=False)

    def prompt_log(self) -> Any:
        """One numbered log of prompts shared by every LLM expert of the run."""
        if self._log is None:
            from kfoundry.experts.llm_expert import PromptLog

            self._log = PromptLog(self.prompts_dir)
        return self._log


Factory = Callable[[Setup], Expert | None]
FACTORIES: dict[str, Factory] = {}


def register(name: str, factory: Factory) -> None:
    """Add (or replace) an expert; a new one comes last in the order."""
    FACTORIES[name] = factory


def _llm(name: str) -> Factory:
    def build(setup: Setup) -> Expert | None:
        if setup.llm is None:
            return None
        from kfoundry.experts.llm_expert import LLMExpert
        from kfoundry.experts.llm_experts import EXPERTS

        return LLMExpert(EXPERTS[name], setup.context, setup.llm, setup.budget, setup.prompt_log())
    return build


def _composer(setup: Setup) -> Expert | None:
    if not setup.composed:
        return None
    from kfoundry.experts.composer.expert import ComposerExpert

    return ComposerExpert(list(setup.composed), setup.is_known)


def _tuner(setup: Setup) -> Expert:
    from kfoundry.experts.tuner_expert import TunerExpert

    return TunerExpert(setup.is_known, setup.device, setup.seed, dict(setup.preferred or {}))


def _recompose(setup: Setup) -> Expert | None:
    if setup.space is None:
        return None
    from kfoundry.experts.genome_experts import RecomposeExpert

    return RecomposeExpert(setup.space, setup.is_known, setup.seed, gains=dict(setup.move_gains or {}))


def _recombine(setup: Setup) -> Expert | None:
    if setup.space is None:
        return None
    from kfoundry.experts.genome_experts import RecombineExpert

    return RecombineExpert(setup.space, setup.is_known, setup.seed, elites=setup.elites)


# the order of the draws: first kernels (initializer, composer), then the improvers
for _name, _factory in (("initializer", _llm("initializer")), ("composer", _composer), ("repair", _llm("repair")),
                        ("memory", _llm("memory")), ("compute", _llm("compute")), ("fusion", _llm("fusion")),
                        ("algorithm", _llm("algorithm")), ("crossover", _llm("crossover")), ("tuner", _tuner),
                        ("recompose", _recompose), ("recombine", _recombine)):
    register(_name, _factory)


def build(setup: Setup, names: Iterable[str] | None = None) -> list[Expert]:
    """The enabled experts, in the registry's order: `names` (all registered by default), less those that
    cannot act in this run."""
    wanted = list(FACTORIES) if names is None else list(names)
    unknown = [n for n in wanted if n not in FACTORIES]
    if unknown:
        raise UsageError(f"unknown expert(s) {', '.join(unknown)}: use some of {', '.join(FACTORIES)}")
    built = [FACTORIES[name](setup) for name in FACTORIES if name in wanted]
    return [expert for expert in built if expert is not None]
