"""What a bench runs with: the method, the evaluation options, the optimize budget, the bounds.
Its fingerprint decides which earlier results `--resume` keeps."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfoundry.errors import UsageError
from kfoundry.evaluate.options import EvalOptions

METHODS = ("optimize", "solutions", "reference")

@dataclass
class BenchSettings:
    method: str
    options: EvalOptions = field(default_factory=EvalOptions)  # set_values: suite-wide, filtered per problem
    solutions: Path | None = None  # --method solutions DIR
    llm: list[str] | None = None  # --method optimize
    max_evals: int | None = None
    max_cost: float | None = None
    target_speedup: float | None = None
    time_per_problem: float | None = None  # seconds per problem
    devices: str | None = None  # --devices: several problems at once, one per device

    def device_list(self) -> list[str]:
        """The devices problems run on at once ([] or one: one problem at a time)."""
        if not self.devices:
            return []
        from kfoundry.evaluate.pool import parse_devices

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
        if self.devices and self.options.device:
            raise UsageError("--devices and --device exclude each other: --devices names where problems run")
        self.device_list()  # a bad spec is said now
        if self.time_per_problem is not None and self.time_per_problem <= 0:
            raise UsageError("--time-per-problem must be a positive number of seconds")
        if self.max_evals is not None and self.max_evals < 1:
            raise UsageError("--max-evals must be at least 1")
        self.options.validate()
        from kfoundry.evaluate.options import resolve_device

        resolve_device(self.options.device, self.options.precision)  # no CUDA, bf16 on CPU: said before any run

    def describe(self) -> dict[str, Any]:
        """The settings as JSON, as recorded in bench.json."""
        options = self.options.verdict_settings()
        options["guard"] = self.method != "reference"
        options["set"] = dict(self.options.set_values)
        data: dict[str, Any] = {"method": self.method, "options": options,
                                "time_per_problem_s": self.time_per_problem}
        if self.method == "solutions":
            data["solutions"] = str(self.solutions.resolve())
        if self.method == "optimize":
            data.update(llm=list(self.llm or []), max_evals=self.max_evals, max_cost=self.max_cost,
                        target_speedup=self.target_speedup)
        return data

    def fingerprint(self, problem_text: str, set_values: dict[str, Any]) -> str:
        """Of the settings and the problem's content: a result is reused only for the same both."""
        data = self.describe()
        data["options"]["set"] = set_values
        payload = json.dumps({"settings": data, "problem": problem_text}, sort_keys=True, default=repr)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]

    def labels(self) -> dict[str, Any]:
        """Labels known before anything ran (what problems record overrides these)."""
        return {"precision": self.options.precision, "tolerance": self.options.atol, "trials": self.options.trials,
                "policy": self.options.policy if self.method != "reference" else "guard skipped (reference)"}
