"""A bench's report: the suite, the run config, the results so far (and those pending, kept from an
earlier call or reused by --resume), its labels and metrics, saved as bench.json, bench.csv and
KernelBench's files. kfoundry.bench.runner fills it; the table and the page show it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kfoundry.bench import config as bench_config
from kfoundry.bench import kernelbench, outputs
from kfoundry.bench.metrics import summarize
from kfoundry.bench.results import ENVIRONMENT_ERROR, ProblemResult, merge_labels
from kfoundry.bench.suite import Suite

if TYPE_CHECKING:
    from kfoundry.run_config import RunConfig


@dataclass
class BenchReport:
    suite: Suite
    config: RunConfig  # its bench section says how
    out: Path
    results: list[ProblemResult] = field(default_factory=list)  # of the selection, in suite order
    pending: list[str] = field(default_factory=list)  # of the selection, not finished (interrupted)
    kept: list[ProblemResult] = field(default_factory=list)  # earlier results outside the selection
    reused: list[str] = field(default_factory=list)  # finished by an earlier call (--resume)
    interrupted: bool = False
    environment_error: str | None = None  # the fault that stopped the bench
    started_at: float = field(default_factory=time.time)

    @property
    def complete(self) -> bool:
        return not self.pending and not self.interrupted and self.environment_error is None

    def judged(self) -> list[ProblemResult]:
        """The results that say something of the method: not a problem the machine failed on."""
        return [r for r in self.results if r.status != ENVIRONMENT_ERROR]

    def labels(self) -> dict[str, str]:
        return merge_labels(self.results, bench_config.labels(self.config))

    def metrics(self) -> dict[str, Any]:
        return summarize([r.to_dict() for r in self.judged()])

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": outputs.FORMAT,
            "suite": str(self.suite.root),
            "directory": str(self.suite.directory),
            "level": self.suite.level,
            "settings": bench_config.describe(self.config),
            "labels": self.labels(),
            "metrics": self.metrics(),
            "complete": self.complete,
            "interrupted": self.interrupted,
            "environment_error": self.environment_error,
            "started_at": self.started_at,
            "updated_at": time.time(),
            "problems": [r.to_dict() for r in self.results],
            "pending": list(self.pending),
            "reused": list(self.reused),
            "skipped": [{"path": path, "reason": reason} for path, reason in self.suite.skipped],
            "kept": [r.to_dict() for r in self.kept],
        }

    def save(self) -> None:
        outputs.write_json(self.out, self.to_dict())
        outputs.write_csv(self.out, self.results)
        kernelbench.write(self.out, self.judged() + self.kept, self.suite.level)
