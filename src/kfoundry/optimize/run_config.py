"""Everything an optimize run runs with, as one object: the sections `search` (OptimizeSettings), `eval`
(the evaluation options that change a verdict, and the --set values), `llm` (the LLM settings other
than its specs, kfoundry.config.LLM_OPTIONS; never a key) and `seeds`. It is what the run store keeps,
and --resume rebuilds the run from it; a store written before `llm` was kept reads back without it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.evaluate import EvalOptions
from kfoundry.optimize.settings import OptimizeSettings


@dataclass
class RunConfig:
    search: OptimizeSettings = field(default_factory=OptimizeSettings)
    eval: EvalOptions = field(default_factory=EvalOptions)
    llm: dict[str, Any] = field(default_factory=dict)
    seeds: list[str] = field(default_factory=list)

    def validate(self) -> None:
        from kfoundry.config import LLM_OPTIONS

        self.search.validate()
        self.eval.validate()
        unknown = sorted(set(self.llm) - set(LLM_OPTIONS) | ({"llm"} & set(self.llm)))
        if unknown:
            raise UsageError(f"unknown LLM setting(s) {', '.join(unknown)} (the specs are search.llm)")

    def to_dict(self) -> dict[str, Any]:
        data = {"search": self.search.to_dict(),
                "eval": {**self.eval.verdict_settings(), "set_values": dict(self.eval.set_values)},
                "seeds": list(self.seeds)}
        if self.llm:
            data["llm"] = dict(self.llm)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        stored = data["eval"]
        return cls(search=OptimizeSettings.from_dict(data["search"]),
                   eval=EvalOptions(**{**stored, "baselines": tuple(stored["baselines"])}),
                   llm=dict(data.get("llm") or {}), seeds=list(data.get("seeds") or []))
