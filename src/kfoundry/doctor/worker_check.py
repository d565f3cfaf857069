"""One real sandboxed worker, started as an evaluation starts a candidate's (kfoundry.evaluate.parent.process.Worker),
asked to read every entry of the parent's import path and import what a job needs (kfoundry.doctor.probe_job):
the sandbox it put in force, what it could not read or import, and whether CUDA starts in it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kfoundry.doctor.check import Check, passed, problem
from kfoundry.doctor.import_path import import_path
from kfoundry.evaluate.parent import environment_faults as faults

PROBE_MODULES = ("kfoundry.evaluate.worker.candidate_job", "kfoundry.evaluate.reference.judge_job", "torch", "triton")
WORKER = "a sandboxed worker"
SANDBOX_FIX = ("a Linux kernel with Landlock (5.13+, ABI 4+ for TCP) and seccomp gives every part; on a machine "
               "you trust, --sandbox off runs candidates with your full access and says so")


@contextmanager
def _own_process() -> Iterator[None]:
    """The worker starts as a process of its own, as every worker does on a GPU: a fork server's child has
    its imports done before its sandbox, so it would prove nothing about them."""
    from kfoundry.evaluate.parent.forkserver import ENABLE_ENV

    before = os.environ.get(ENABLE_ENV)
    os.environ[ENABLE_ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENABLE_ENV, None)
        else:
            os.environ[ENABLE_ENV] = before


def sandbox_line(report: dict[str, Any]) -> Check:
    missing = list(report.get("missing") or [])
    if not report:
        return problem("sandbox", "the worker reported no sandbox", SANDBOX_FIX)
    if missing:
        return problem("sandbox", "the kernel lacks part of the candidates' sandbox: " + "; ".join(missing),
                       SANDBOX_FIX)
    parts = [report.get(k) for k in ("filesystem", "network", "processes") if report.get(k)]
    return passed("sandbox", "; ".join(parts))


def _module_problems(modules: dict[str, Any]) -> list[Check]:
    checks = []
    for name, info in modules.items():
        if not info:
            continue
        failure = faults.import_failure(str(info.get("traceback") or ""), None)  # no code under test ran
        if failure is not None:
            fault = failure.fault(WORKER)
            checks.append(problem("worker", fault.cause, fault.fix, fatal=True))
        else:
            checks.append(problem("worker", f"{WORKER} cannot import {name}: {info.get('error')}",
                                  f"check that `python -c 'import {name}'` works with this Python", fatal=True))
    return checks


def check_worker(device: str = "cpu", timeout_s: float = 180.0) -> list[Check]:
    """The sandbox line, the worker line and, on a GPU, the CUDA line."""
    from kfoundry.evaluate.parent.process import Worker

    entries = import_path()
    with _own_process():
        worker = Worker(device, label="candidate", sandbox="on")
    try:
        outcome = worker.run({"kind": "probe", "paths": entries, "modules": list(PROBE_MODULES), "device": device},
                             timeout_s)
        report = worker.sandbox
    finally:
        worker.close()
    result = outcome.result
    if outcome.timed_out:
        return [problem("worker", f"{WORKER} did not finish its check within {timeout_s:.0f} s (phase "
                                  f"{outcome.phase})", "the machine may be overloaded: try again, or look at "
                                  "what holds its CPUs")]
    if result is None or "internal_error" in result:
        fault = faults.start_fault(WORKER, faults.died(outcome), outcome.stderr_tail,
                                   str((result or {}).get("internal_error") or ""))
        return [sandbox_line(report) if report else problem("sandbox", "no worker started to report it",
                                                            "see the worker line"),
                problem("worker", fault.cause, fault.fix, fatal=True)]
    checks = [sandbox_line(report)]
    modules = _module_problems(result.get("modules") or {})
    blocked = {entry: why for entry, why in (result.get("entries") or {}).items() if why}
    checks += modules
    if not modules and blocked:
        listed = "; ".join(f"{entry}: {why}" for entry, why in blocked.items())
        checks.append(problem("worker", f"{WORKER} cannot use {len(blocked)} of {len(entries)} import path "
                                        f"entries ({listed}): a problem or a candidate importing from them fails",
                              "make them readable to kfoundry's workers, or install what they hold into this "
                              "Python environment"))
    elif not modules:
        checks.append(passed("worker", f"{WORKER} reads all {len(entries)} import path entries and imports "
                                       f"kfoundry's worker modules, torch {result.get('torch')} and Triton"))
    if device.startswith("cuda"):
        if "error" in result:
            line = faults.cuda_start_failure(str(result["error"])) or str(result["error"])
            fault = faults.cuda_fault(WORKER, line)
            checks.append(problem("cuda", fault.cause, fault.fix, fatal=True))
        else:
            checks.append(passed("cuda", f"starts in {WORKER}: {result.get('cuda')}"))
    return checks
