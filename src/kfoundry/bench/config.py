"""A bench's whole run config (kfoundry.run_config.RunConfig): its `bench` section (kfoundry.bench.settings)
with the sections it takes from every run, the evaluation options and for --method optimize the search's
LLM and budget. Checked before any problem runs, described as bench.json records it, and fingerprinted:
the fingerprint of the settings and a problem decides which earlier results `--resume` keeps."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from kfoundry.errors import UsageError

if TYPE_CHECKING:
    from kfoundry.run_config import RunConfig


def validate(config: RunConfig) -> None:
    """A bench's config: its own section, then the sections every run checks (the search budget it
    passes on, the evaluation options), and the device."""
    bench, options = config.bench, config.eval
    bench.validate()
    if bench.devices and options.device:
        raise UsageError("--devices and --device exclude each other: --devices names where problems run")
    config.validate()
    from kfoundry.evaluate.parent.options import resolve_device

    resolve_device(options.device, options.precision)  # no CUDA, bf16 on CPU: said before any run


def describe(config: RunConfig) -> dict[str, Any]:
    """The settings as JSON, as recorded in bench.json."""
    bench, search = config.bench, config.search
    options = config.eval.verdict_settings()
    options["guard"] = bench.method != "reference"
    options["set"] = dict(config.eval.set_values)
    data: dict[str, Any] = {"method": bench.method, "options": options, "time_per_problem_s": bench.time_per_problem}
    if bench.method == "solutions":
        data["solutions"] = str(bench.solutions.resolve())
    if bench.method == "optimize":
        data.update(llm=list(search.llm or []), max_evals=search.max_evals, max_cost=search.max_cost,
                    target_speedup=search.target_speedup)
    return data


def fingerprint(config: RunConfig, problem_text: str, set_values: dict[str, Any]) -> str:
    """Of the settings and the problem's content: a result is reused only for the same both."""
    data = describe(config)
    data["options"]["set"] = set_values
    payload = json.dumps({"settings": data, "problem": problem_text}, sort_keys=True, default=repr)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def labels(config: RunConfig) -> dict[str, Any]:
    """Labels known before anything ran (what problems record overrides these)."""
    options, method = config.eval, config.bench.method
    return {"precision": options.precision, "tolerance": options.atol, "trials": options.trials,
            "policy": options.policy if method != "reference" else "guard skipped (reference)"}
