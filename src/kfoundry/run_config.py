"""Everything a run runs with, as one object, in sections: `search` (OptimizeSettings: budget, islands,
experts, the LLM's provider specs), `eval` (EvalOptions), `llm` (LLMSettings: how the LLM is built
from its specs; never a key), `bench` (BenchSettings: what a bench adds), `log` (LogSettings: the log
file and the heartbeat; not stored with a run) and `seeds` (the user's kernels for the first
population).

The command line, the environment and kfoundry.toml build it through kfoundry.config
(`config.build_run_config`); the Python API builds it directly. An optimize run stores `to_dict()` and
--resume rebuilds the run from `from_dict`: the search, the evaluation options that change a verdict,
the --set values, the LLM settings. A store written before the LLM settings were kept reads back with
`llm` None, and such a run takes today's, as it did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kfoundry.bench.settings import BenchSettings
from kfoundry.evaluate.parent.options import EvalOptions
from kfoundry.llm.settings import LLMSettings
from kfoundry.logs import LogSettings
from kfoundry.optimize.settings import OptimizeSettings

SECTIONS = {"search": OptimizeSettings, "eval": EvalOptions, "llm": LLMSettings, "bench": BenchSettings,
            "log": LogSettings}


@dataclass
class RunConfig:
    search: OptimizeSettings = field(default_factory=OptimizeSettings)
    eval: EvalOptions = field(default_factory=EvalOptions)
    llm: LLMSettings | None = None  # None: a store from before the LLM settings were kept
    bench: BenchSettings = field(default_factory=BenchSettings)
    log: LogSettings = field(default_factory=LogSettings)
    seeds: list[str] = field(default_factory=list)

    def validate(self) -> None:
        self.search.validate()
        self.eval.validate()
        self.log.validate()

    def to_dict(self) -> dict[str, Any]:
        """What an optimize run stores (the bench section is the bench's own record, and the log is the
        invocation's: neither is kept here)."""
        data = {"search": self.search.to_dict(),
                "eval": {**self.eval.verdict_settings(), "set_values": dict(self.eval.set_values)},
                "seeds": list(self.seeds)}
        if self.llm is not None and self.search.llm:
            data["llm"] = self.llm.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        stored = data["eval"]
        llm = data.get("llm")
        return cls(search=OptimizeSettings.from_dict(data["search"]),
                   eval=EvalOptions(**{**stored, "baselines": tuple(stored["baselines"])}),
                   llm=LLMSettings.from_dict(llm) if llm else None, seeds=list(data.get("seeds") or []))
