"""The settings of one optimization: what the search may spend, how it is shaped, which experts
take part. Stored in the run store, so `--resume` continues with the same ones."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from kfoundry.errors import UsageError

DEFAULT_MAX_EVALS = 32  # when no budget at all is given: a run a newcomer can wait for
DEFAULT_STAGNATION = 8  # generations without a better candidate


@dataclass
class OptimizeSettings:
    islands: int = 4
    migrate_every: int = 3
    topology: str = "ring"
    selection: str = "tournament"  # or "proportional" (fitness-proportional), both with an exploration share
    capacity: int = 12
    concurrency: int = 4  # expert proposals (LLM calls) at once
    max_evals: int | None = None
    max_cost: float | None = None  # dollars of LLM calls
    max_time_s: float | None = None
    max_generations: int | None = None
    target_speedup: float | None = None
    target_roofline: float | None = None  # a fraction, e.g. 0.8
    stagnation: int | None = DEFAULT_STAGNATION
    llm: list[str] = field(default_factory=list)  # provider specs; empty: the programmatic experts only
    backend: str = "triton"
    compose_variants: int = 4  # tile configurations the composer writes for the first population
    retrieve: int = 5  # library items shown to the experts
    library: str | None = None  # path; None: the user's cache; "off": no library
    seed: int = 0  # the search's random state (parents, experts, tuner)
    reject_similar: float | None = None  # cosine similarity of code embeddings above which a proposal is dropped
    devices: str | None = None  # "cuda:0,cuda:1", "all", "cpu:2": one evaluation worker each
    cluster: str | None = None  # "ray" or "ray://HOST:PORT": evaluation workers are Ray actors
    target_gpu: str | None = None  # a CPU run's prompts show this GPU's datasheet figures (a GPU run: its own)
    # the final best judged again at a second size set (kfoundry.evaluate.parent.size_check); KFOUNDRY_CHECK_SIZES=0 turns
    # it off for the API as for the command line (where kfoundry.config reads the environment)
    check_sizes: bool = field(default_factory=lambda: os.environ.get("KFOUNDRY_CHECK_SIZES", "1").strip().lower()
                              not in ("0", "false", "no", "off"))
    # on a GPU, generation 0's best and the final best timed again once the search is over, one after the other with
    # nothing else in flight (kfoundry.bench.confirm): the gain as the search timed it carried up to 36% of timing
    # (H100, 2026-12-06); KFOUNDRY_TIME_AGAIN=0 turns it off as for the command line
    time_again: bool = field(default_factory=lambda: os.environ.get("KFOUNDRY_TIME_AGAIN", "1").strip().lower()
                             not in ("0", "false", "no", "off"))

    def validate(self) -> None:
        if self.islands < 1:
            raise UsageError("--islands must be at least 1")
        if self.migrate_every < 1:
            raise UsageError("--migrate-every must be at least 1")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        for name in ("max_evals", "max_generations"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        for name in ("max_cost", "max_time_s", "target_speedup"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise UsageError(f"--{name.replace('_s', '').replace('_', '-')} must be a positive number")
        if self.target_roofline is not None and not 0 < self.target_roofline <= 1:
            raise UsageError("--target-roofline is a fraction of the roofline, between 0 and 1")
        from kfoundry.search.archipelago import TOPOLOGIES
        from kfoundry.search.selection import METHODS

        if self.topology not in TOPOLOGIES:
            raise UsageError(f"unknown topology {self.topology!r}: use one of {', '.join(TOPOLOGIES)}")
        if self.selection not in METHODS:
            raise UsageError(f"unknown selection {self.selection!r}: use one of {', '.join(METHODS)}")
        if self.reject_similar is not None and not 0 < self.reject_similar <= 1:
            raise UsageError("--reject-similar is a cosine similarity between 0 and 1 (0.95 rejects renames)")
        if self.devices and self.cluster:
            raise UsageError("--devices and --cluster exclude each other: a Ray cluster brings its own GPUs")
        if self.backend not in ("triton", "cuda"):
            raise UsageError(f"unknown backend {self.backend!r}: use triton or cuda")
        if self.target_gpu:
            from kfoundry.evaluate.shared.device_facts import target_facts

            target_facts(self.target_gpu)  # an unknown name says which are known

    def with_default_budget(self) -> OptimizeSettings:
        if all(v is None for v in (self.max_evals, self.max_cost, self.max_time_s, self.max_generations)):
            self.max_evals = DEFAULT_MAX_EVALS
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OptimizeSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
