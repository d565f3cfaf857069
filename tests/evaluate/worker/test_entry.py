"""kfoundry.evaluate.worker.entry: what an evaluation process has imported. The judge, the baseline process
and a candidate's worker (and the CPU fork servers they are forked from: a forked child holds every module
its server imported) load neither the LLM stack nor the experience library: a dependency of those missing
or broken where the tool's dependencies were installed (a folder on PYTHONPATH) made every candidate crash
at load.

Each process is a real one, started as the evaluator starts it. What it imported is read by code it runs
anyway: the problem's code (which the judge and the baseline process run, unsandboxed) writes its
sys.modules to a file; the candidate's forward (sandboxed: it can write nothing outside its folder) raises
with what it found, which the verdict's message carries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kfoundry.evaluate import EvalOptions, Evaluator
from kfoundry.evaluate.parent.forkserver import ENABLE_ENV
from kfoundry.evaluate.parent.judge import baseline_worker

# the LLM stack (the SDKs, tenacity, our providers) and the experience library (retrieval, BM25, embeddings)
FORBIDDEN = ("tenacity", "openai", "anthropic", "httpx", "kfoundry.llm", "bm25s", "jax", "jaxlib",
             "sentence_transformers", "kfoundry.library")


def forbidden(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))


PROBLEM = '''"""y = 2x + 0.5; its code writes the sys.modules of each process that runs it to SNAPSHOTS."""
import json
import os
import sys

import torch
import torch.nn as nn

SNAPSHOTS = {snapshots!r}


def _snapshot():
    label = os.environ.get("KFOUNDRY_WORKER_LABEL") or "parent"
    with open(os.path.join(SNAPSHOTS, label + "-" + str(os.getpid()) + ".json"), "w") as f:
        json.dump(sorted(sys.modules), f)


class Model(nn.Module):
    def forward(self, x):
        _snapshot()  # late in the judge's job: what its work imported is in too
        return x * 2.0 + 0.5


def get_inputs():
    _snapshot()
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''"""Correct, unless its worker has imported one of FORBIDDEN (or is no worker at all)."""
import sys

import torch.nn as nn

FORBIDDEN = {forbidden!r}
EXPECTED = ("torch", "kfoundry.evaluate.worker.entry", "kfoundry.evaluate.worker.candidate_job")


class ModelNew(nn.Module):
    def forward(self, x):
        names = sorted(sys.modules)
        found = [m for m in names if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
        missing = [m for m in EXPECTED if m not in sys.modules]
        if found or missing:
            raise RuntimeError("PROBE: " + str(len(names)) + " modules; forbidden " + ", ".join(found)
                               + "; expected but missing " + ", ".join(missing))
        return x * 2.0 + 0.5
'''


@pytest.fixture(params=["forked", "own process"])
def fork_server(request, monkeypatch) -> str:
    monkeypatch.setenv(ENABLE_ENV, "1" if request.param == "forked" else "0")
    return request.param


def _snapshots(folder: Path, label: str) -> list[list[str]]:
    return [json.loads(path.read_text()) for path in sorted(folder.glob(f"{label}-*.json"))]


def _baseline_job(problem: Path) -> dict:
    """What the evaluator sends its baseline process (only on a GPU: here each baseline fails, after the
    job has built the model and the inputs, which is what runs the problem's code)."""
    return {"kind": "baselines", "key": "imports-test", "problem_path": str(problem),
            "problem_text": problem.read_text(), "overrides": {}, "device": "cpu", "precision": "fp32",
            "eval_mode": False, "init_seed": 1, "trial_seeds": [2], "cache_dir": None,
            "timing": {"trials": 1, "budget_s": 1.0, "baselines": ["eager"], "no_cache": True}}


def test_evaluation_processes_import_neither_the_llm_stack_nor_the_library(tmp_path, fork_server):
    snapshots = tmp_path / "modules"
    snapshots.mkdir()
    problem = tmp_path / "problem.py"
    problem.write_text(PROBLEM.format(snapshots=str(snapshots)))
    candidate = tmp_path / "candidate.py"
    candidate.write_text(CANDIDATE.format(forbidden=FORBIDDEN))

    # guard off: the probe reads sys.modules and computes with PyTorch, which the guard rightly refuses
    options = EvalOptions(device="cpu", trials=1, seed=7, timeout_s=180, guard=False)
    with Evaluator(problem, options) as evaluator:
        evaluation = evaluator.evaluate(candidate)
    with baseline_worker("cpu", None, {}) as worker:
        outcome = worker.run(_baseline_job(problem), timeout_s=180, on_request=lambda message: {"ok": True})
    assert outcome.result and "problem_error" not in outcome.result, (outcome.result, outcome.stderr_tail)

    problems = [] if evaluation.status == "ok" else [f"the candidate's worker: {evaluation.message}"]
    for label, job_module in (("judge", "kfoundry.evaluate.reference.judge_job"), ("baselines", "kfoundry.evaluate.reference.baseline_job")):
        taken = _snapshots(snapshots, label)
        assert taken, f"the {label} process never ran the problem's code ({sorted(p.name for p in snapshots.iterdir())})"
        for modules in taken:
            assert "torch" in modules and job_module in modules, f"{label}: not a worker's modules?"
            if forbidden(modules):
                problems.append(f"the {label} process imported {', '.join(forbidden(modules))}")
    assert not problems, f"workers {fork_server}:\n" + "\n".join(problems)
