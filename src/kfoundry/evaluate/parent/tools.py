"""Re-runs of one candidate under Nsight Compute and compute-sanitizer, for the diagnosis.

Each tool wraps a fresh worker of its own (`Worker(wrapper=...)`) that replays one forward of the
candidate on the evaluator's prepared inputs (kfoundry.evaluate.worker.replay_job). The tool writes its
log to a file outside the worker's directory; the log is parsed here and its tail kept. A tool
that is missing, a CPU evaluator, or a run that yields no log gives an explanatory "error"
string: nothing here raises.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from kfoundry.diagnose.ncu import ncu_command, ncu_errors, parse_ncu_csv
from kfoundry.diagnose.sanitizer import parse_memcheck, sanitizer_command
from kfoundry.evaluate.parent.process import Worker, WorkerOutcome
from kfoundry.sandbox.secrets import scrub_tree

LOG_TAIL = 20000  # characters of each tool's raw log kept in the result
WORKER = ["-m", "kfoundry.sandbox.start"]
# Without PyTorch's caching allocator every tensor is an allocation of its own, so memcheck sees a
# read past a tensor's end; with it, the read lands inside a larger cached block and goes unseen.
SANITIZER_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}


def find_tool(name: str) -> str | None:
    """The tool's path: on PATH, else in the CUDA toolkit's bin directory."""
    found = shutil.which(name)
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base:
            candidate = Path(base) / "bin" / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def replay_job(evaluator, candidate: Path) -> dict[str, Any]:
    return {
        "kind": "replay",
        "candidate_path": str(Path(candidate).resolve()),
        "overrides": evaluator.source.overrides,
        "device": evaluator.device,
        "precision": evaluator.options.precision,
        "eval_mode": evaluator.options.eval_mode,
        "init_seed": evaluator.init_seed,
        "seed": evaluator.trial_seeds[0],
    }


def _outcome(outcome: WorkerOutcome, timeout_s: float) -> dict[str, Any]:
    result = outcome.result or {}
    if outcome.timed_out:
        status, message = "timeout", f"did not finish within {timeout_s:g} s (phase {outcome.phase})"
    elif outcome.result is None or "internal_error" in result:
        status = "crash"
        died = f"killed by {outcome.signal_name}" if outcome.signal_name else f"exited with code {outcome.returncode}"
        message = f"the worker {died} in phase {outcome.phase}" + (
            f": {result['internal_error']}" if "internal_error" in result else "")
    else:
        status, message = result.get("status", "crash"), result.get("message", "")
    return {"status": status, "message": message, "outputs": result.get("outputs"), "phase": outcome.phase,
            "returncode": outcome.returncode, "timed_out": outcome.timed_out, "elapsed_s": round(outcome.elapsed_s, 3),
            "stderr_tail": outcome.stderr_tail[-2000:]}


def run_replay(evaluator, candidate: Path, *, wrapper: list[str] | None = None, extra_env: dict[str, str] | None = None,
               timeout_s: float = 600.0, label: str = "replay") -> dict[str, Any]:
    """Replay one forward of the candidate in a fresh worker (under `wrapper`); what happened."""
    prepared = evaluator.prepare()
    # the problem's folder on its import path, as in every worker of the evaluation it replays
    env = {**evaluator._problem_env(), **(extra_env or {})}
    with Worker(evaluator.device, wrapper=wrapper, memory_limit_bytes=evaluator.memory_limit,
                extra_env=env, label=label, sandbox=evaluator.options.sandbox) as worker:
        shutil.copy(prepared.exchange / "init_inputs.pt", worker.workdir / "init_inputs.pt")
        written = prepared.write_inputs("0", worker.workdir)
        written.rename(worker.workdir / "inputs_0.pt")
        copy = worker.copy_in(Path(candidate))
        outcome = worker.run(replay_job(evaluator, copy), timeout_s)
    result = _outcome(outcome, timeout_s)
    return scrub_tree(result, rewrite={str(copy): str(Path(candidate).resolve())})


def _no_run(evaluator, what: str, tool: str) -> str | None:
    """Why the tool cannot run here, or None."""
    if not str(evaluator.device).startswith("cuda"):
        return f"{what} needs a CUDA GPU: this evaluation runs on the CPU (use --device cuda on a GPU machine)"
    if find_tool(tool) is None:
        return (f"{tool} was not found on PATH nor in $CUDA_HOME/bin or /usr/local/cuda/bin: install the CUDA "
                f"toolkit's {what} or put its bin directory on PATH")
    return None


def _wrapped_run(evaluator, candidate: Path, tool: str, build, extra_env, timeout_s: float) -> tuple[str, str, dict]:
    """Run the replay under `build(log_path, executable)`; (command line, log text, replay summary)."""
    with tempfile.TemporaryDirectory(prefix=f"kfoundry-{tool}-") as logs:
        log = Path(logs) / f"{tool}.log"
        wrapper = build(log, find_tool(tool))
        command = shlex.join([*wrapper, sys.executable, *WORKER])
        replay = run_replay(evaluator, candidate, wrapper=wrapper, extra_env=extra_env, timeout_s=timeout_s, label=tool)
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return command, text, replay


def _failure(replay: dict[str, Any], text: str, tool: str) -> str:
    lines = ncu_errors(text) if tool == "ncu" else []
    if lines:
        return "; ".join(lines[:3])
    if replay["status"] in ("timeout", "crash"):
        return f"the replay under {tool} failed: {replay['message']}" + (
            f"; stderr: {replay['stderr_tail'][-500:]}" if replay["stderr_tail"] else "")
    if not text:
        return f"{tool} wrote no log (exit code {replay['returncode']}); stderr: {replay['stderr_tail'][-500:]}"
    if replay["status"] != "ok":
        return f"the candidate failed before the profiled run: {replay['message'][:500]}"
    return f"{tool} recorded nothing for the replayed forward"


def _ncu(evaluator, candidate: Path, timeout_s: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"records": [], "error": _no_run(evaluator, "Nsight Compute", "ncu"), "command": None}
    if entry["error"]:
        return entry
    command, text, replay = _wrapped_run(evaluator, candidate, "ncu", lambda log, exe: ncu_command(log, exe), None,
                                         timeout_s)
    records = parse_ncu_csv(text)
    entry.update(records=records, command=command, replay=replay, log=text[-LOG_TAIL:],
                 error=None if records else _failure(replay, text, "ncu"))
    return entry


def _sanitizer(evaluator, candidate: Path, timeout_s: float) -> dict[str, Any]:
    entry: dict[str, Any] = {"report": {}, "error": _no_run(evaluator, "compute-sanitizer", "compute-sanitizer"),
                             "command": None}
    if entry["error"]:
        return entry
    command, text, replay = _wrapped_run(evaluator, candidate, "compute-sanitizer",
                                         lambda log, exe: sanitizer_command(log, exe), SANITIZER_ENV, timeout_s)
    report = parse_memcheck(text)
    complete = report["summary"] is not None
    error = None if complete and not replay["timed_out"] else _failure(replay, text, "compute-sanitizer")
    entry.update(report=report, command=command, replay=replay, log=text[-LOG_TAIL:], error=error,
                 environment=dict(SANITIZER_ENV))
    return entry


def run_tools(evaluator, candidate: Path, ncu: bool, sanitize: bool, timeout_s: float | None = None) -> dict[str, Any]:
    """{"ncu": {"records", "error", "command", ...}, "sanitizer": {"report", "error", "command", ...}}
    for the tools asked for; each re-run gets a fresh worker and `timeout_s` (default: twice the
    evaluation's timeout, at least 600 s)."""
    timeout = timeout_s if timeout_s is not None else max(600.0, 2 * float(evaluator.options.timeout_s))
    out: dict[str, Any] = {}
    for name, wanted, run in (("ncu", ncu, _ncu), ("sanitizer", sanitize, _sanitizer)):
        if not wanted:
            continue
        try:
            out[name] = run(evaluator, Path(candidate), timeout)
        except Exception as exc:  # a tool is evidence, never a reason for the evaluation to fail
            empty = {"records": []} if name == "ncu" else {"report": {}}
            out[name] = {**empty, "error": f"{type(exc).__name__}: {exc}", "command": None}
    return out
