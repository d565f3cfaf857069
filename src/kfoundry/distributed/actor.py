"""The evaluation worker that runs as a Ray actor: an Evaluator for one problem on the actor's device.

The problem and the candidates arrive as source text and are written to files of the actor's own; the
evaluation goes back as `Evaluation.to_dict()`, with the actor's file paths replaced by the driver's.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from kfoundry.evaluate.parent.evaluator import Evaluator
from kfoundry.evaluate.parent.options import EvalOptions
from kfoundry.sandbox.process_flags import make_non_dumpable
from kfoundry.types import to_jsonable

GUARD = Path(__file__).resolve().with_name("parent_guard.py")


def guard_wrapper(options: EvalOptions) -> list[str]:
    """The candidate worker's wrapper: the parent guard first, then whatever wrapper was asked for."""
    return [sys.executable, "-S", str(GUARD), str(os.getpid()), *(options.wrapper or [])]


def relabel(data: dict[str, Any], paths: dict[str, str]) -> dict[str, Any]:
    """`data` with every occurrence of each key of `paths` (in any string: fields, tracebacks) replaced."""
    text = json.dumps(data, default=str)
    for old, new in paths.items():
        text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    return json.loads(text)


def _import_from(folder: Path) -> None:
    """The driver's problem folder on this process's import path where this node sees it (the driver's own
    machine, a shared file system), for the problem's own modules: every worker gets this process's import
    path, readable (kfoundry.sandbox.environment, kfoundry.sandbox.policy)."""
    if folder.is_dir() and str(folder) not in sys.path:
        sys.path.append(str(folder))


class EvaluationWorker:
    """Wrapped by `ray.remote` in kfoundry.distributed.ray_evaluator; plain here so that importing it needs
    no Ray."""

    def __init__(self) -> None:
        make_non_dumpable()  # a long-lived process of ours beside candidates: no one reads its memory
        self.workdir = Path(tempfile.mkdtemp(prefix="kfoundry-ray-")).resolve()
        self.evaluator: Evaluator | None = None
        self.paths: dict[str, str] = {}
        self.count = 0

    def setup(self, problem_name: str, problem_text: str, options: EvalOptions, driver_problem: str) -> dict[str, Any]:
        """Write the problem, run its reference here; what the driver needs to know of it."""
        import ray

        path = self.workdir / "problem" / problem_name
        path.parent.mkdir()
        path.write_text(problem_text, encoding="utf-8")
        _import_from(Path(driver_problem).parent)
        self.evaluator = Evaluator(path, replace(options, wrapper=guard_wrapper(options)))
        prepared = self.evaluator.prepare()
        self.paths = {str(path): driver_problem}
        return {
            "node": ray.util.get_node_ip_address(),
            "actor": ray.get_runtime_context().get_actor_id(),
            "pid": os.getpid(),
            "device": self.evaluator.device,
            "device_facts": to_jsonable(prepared.device_facts),
            "cost": to_jsonable(prepared.cost),
            "warnings": list(prepared.warnings),
            "truth": prepared.truth_status,
            "weak": dict(prepared.weak),
            "baselines": prepared.baselines,
            "reference_rounding": to_jsonable(prepared.reference_rounding),
        }

    def evaluate(self, name: str, text: str, driver_candidate: str) -> dict[str, Any]:
        """Evaluate one candidate given as source text; its Evaluation.to_dict()."""
        self.count += 1
        folder = self.workdir / f"candidate-{self.count}"
        folder.mkdir()
        path = folder / name
        path.write_text(text, encoding="utf-8")
        try:
            data = self.evaluator.evaluate(path).to_dict()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return relabel(data, {**self.paths, str(path): driver_candidate})

    def ping(self) -> int:
        return os.getpid()

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.close()
        shutil.rmtree(self.workdir, ignore_errors=True)
