"""What a bench adds to a run's config (kfoundry.run_config.RunConfig: its `bench` section): the
method, the solutions' directory, the time per problem, the devices problems run on at once. The
rest comes from the config's other sections: the evaluation options, and for --method optimize the
search's LLM and budget (kfoundry.bench.config checks, describes and fingerprints the whole)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kfoundry.errors import UsageError

METHODS = ("optimize", "solutions", "reference")


@dataclass
class BenchSettings:
    method: str = "optimize"
    solutions: Path | None = None  # --method solutions DIR
    time_per_problem: float | None = None  # seconds per problem
    devices: str | None = None  # --devices: several problems at once, one per device

    def device_list(self) -> list[str]:
        """The devices problems run on at once ([] or one: one problem at a time)."""
        if not self.devices:
            return []
        from kfoundry.evaluate.parent.pool import parse_devices

        return parse_devices(self.devices)

    def validate(self) -> None:
        if self.method not in METHODS:
            raise UsageError(f"unknown --method {self.method!r}: use one of {', '.join(METHODS)}")
        if self.method == "solutions":
            if self.solutions is None:
                raise UsageError("--method solutions needs the directory of solution files: "
                                 "kfoundry bench SUITE --method solutions DIR")
            if not self.solutions.is_dir():
                raise UsageError(f"solutions directory not found: {self.solutions}")
        elif self.solutions is not None:
            raise UsageError(f"a solutions directory ({self.solutions}) goes only with --method solutions")
        self.device_list()  # a bad spec is said now
        if self.time_per_problem is not None and self.time_per_problem <= 0:
            raise UsageError("--time-per-problem must be a positive number of seconds")
