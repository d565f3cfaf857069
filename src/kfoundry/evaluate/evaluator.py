"""The evaluation cascade, driven from the parent process (which never imports a candidate).

An Evaluator prepares a problem once (reference process: inputs, expected outputs, baselines)
and then judges any number of candidates, each in a fresh worker process.
"""

from __future__ import annotations

import platform
import re
import random
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

from kfoundry import paths
from kfoundry.errors import CandidateFileError, ProblemError
from kfoundry.diagnose import diagnose
from kfoundry.diagnose.numeric import error_pattern, nondeterminism
from kfoundry.evaluate.compare import Comparison, IndexSource, compare_outputs, flatten_outputs
from kfoundry.evaluate.options import EvalOptions, resolve_device
from kfoundry.evaluate.process import Worker, WorkerOutcome, WorkerPool, default_memory_limit, work_root
from kfoundry.evaluate.guarding import dynamic_guard, fail_with, static_guard, timing_guard
from kfoundry.evaluate.timing import TIMING_METHOD
from kfoundry.guard.findings import Finding
from kfoundry.problem import ProblemSource, read_problem, read_source
from kfoundry.types import (CorrectnessReport, DeviceFacts, Evaluation, ProblemCost, TimingReport,
                            TimingStats)

HIDDEN_SETS = ("probe", "outlier")  # input sets the guard uses, never the trials
CPU_TIMING_REASON = "no GPU: the interpreter is not a performance measurement"
Progress = Callable[[str], None]


def _versions() -> tuple[str, str | None]:
    try:
        import triton

        return torch.__version__, triton.__version__
    except ImportError:
        return torch.__version__, None


def _stats(data: dict[str, Any] | None) -> TimingStats | None:
    return TimingStats(**data) if data else None


def _load(path: Path) -> Any:
    # mapped, not read: a worker's file of outputs can be hundreds of MB, and is mostly read once
    return torch.load(path, weights_only=True, mmap=True)


def _inputs_changed(before: list, after: list) -> int | None:
    """Index of the first input tensor the forward changed, if any."""
    for i, (a, b) in enumerate(zip(before, after)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                return i
            same = a == b
            if a.is_floating_point():
                same |= torch.isnan(a) & torch.isnan(b)
            if not bool(same.all()):
                return i
    return None


def _garbage_only(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether every element that differs between the two runs holds, in one run or the other, what
    unwritten memory holds (NaN poison, Inf, denormals, absurd magnitudes) rather than a value."""
    if not a.is_floating_point():
        return False
    a, b = a.double(), b.double()
    differ = (a != b) & ~(torch.isnan(a) & torch.isnan(b))
    finite = torch.cat([a[torch.isfinite(a)].flatten(), b[torch.isfinite(b)].flatten()])
    scale = float(finite.abs().median()) if finite.numel() else 1.0

    def garbage(x: torch.Tensor) -> torch.Tensor:
        size = x.abs()
        return ~torch.isfinite(x) | (size > 1e6 * (scale + 1.0)) | ((size < 1e-30) & (size > 0))

    return bool((garbage(a) | garbage(b))[differ].all())


class PreparedProblem:
    """What the reference process produced: held in the parent's memory only."""

    def __init__(self, source: ProblemSource, result: dict[str, Any], exchange: Path, trials: int) -> None:
        self.source = source
        self.exchange = exchange
        self.warnings: list[str] = result["warnings"]
        self.weak: dict[str, bool] = result.get("weak", {})
        self.truth_status: str = result["truth"]
        self.output_meta = result["output_meta"]
        self.cost = ProblemCost(**result["cost"])
        self.device_facts = DeviceFacts(**result["device_facts"])
        self.baselines: dict[str, Any] | None = result.get("baselines")
        self.names = [str(k) for k in range(trials)] + list(HIDDEN_SETS)
        self.inputs = {name: _load(exchange / f"inputs_{name}.pt") for name in self.names}
        self.expected = {}
        for name in self.names:
            path = exchange / f"expected_{name}.pt"
            data = torch.load(path, weights_only=True)
            path.unlink()  # gone from disk before any candidate runs
            data["index_sources"] = {int(i): IndexSource(**s) for i, s in data["index_sources"].items()}
            self.expected[name] = data


class Evaluator:
    """Evaluates candidates for one problem; the reference runs once, in its own process."""

    def __init__(self, problem: str | Path, options: EvalOptions | None = None, progress: Progress | None = None,
                 spare: bool = True):
        self.spare = spare  # keep a worker started ahead for the next candidate
        self.options = options or EvalOptions()
        self.options.validate()
        self.device = resolve_device(self.options.device, self.options.precision)
        self.source = read_problem(problem, self.options.set_values)
        self.progress = progress or (lambda message: None)
        base = self.options.seed if self.options.seed is not None else secrets.randbits(31)
        rng = random.Random(base)
        self.base_seed = base
        self.init_seed = rng.randrange(2**31)
        self.trial_seeds = [rng.randrange(2**31) for _ in range(self.options.trials)]
        self.probe_seed = rng.randrange(2**30)
        self.cache_dir = self.options.cache_dir or paths.cache_dir()
        self.memory_limit = self.options.memory_limit_bytes or default_memory_limit()
        self.pool = WorkerPool(self.device, wrapper=self.options.wrapper, memory_limit_bytes=self.memory_limit)
        self.prepared: PreparedProblem | None = None
        self.reference_seconds = 0.0
        self._exchange: Path | None = None

    # -- the reference side ---------------------------------------------------------------
    def prepare(self) -> PreparedProblem:
        if self.prepared is not None:
            return self.prepared
        if self.device == "cpu":
            self.pool.prestart()  # the candidate's worker starts while the reference runs
        self._exchange = Path(tempfile.mkdtemp(prefix="kfoundry-exchange-", dir=work_root(self.device)))
        opts = self.options
        job = {
            "kind": "reference",
            "problem_path": str(self.source.path),
            "problem_text": self.source.text,
            "problem_hash": self.source.content_hash,
            "overrides": self.source.overrides,
            "device": self.device,
            "precision": opts.precision,
            "eval_mode": opts.eval_mode,
            "init_seed": self.init_seed,
            "trial_seeds": self.trial_seeds,
            "probe_seed": self.probe_seed,
            "tolerance": opts.atol,
            "exchange_dir": str(self._exchange),
            "cache_dir": str(self.cache_dir),
            "measure_device": opts.measure_device,
            "timing": {"trials": opts.timing_trials, "budget_s": opts.timing_budget_s,
                       "baselines": list(opts.baselines), "no_cache": opts.no_cache},
        }
        self.progress("reference: computing expected outputs" + (" and baselines" if self.device != "cpu" else ""))
        started = time.monotonic()
        with Worker(self.device, label="reference", memory_limit_bytes=self.memory_limit,
                    extra_env={"TORCHINDUCTOR_CACHE_DIR": str(self.cache_dir / "inductor")}) as worker:
            outcome = worker.run(job, opts.reference_timeout_s)
        self.reference_seconds = time.monotonic() - started
        result = outcome.result or {}
        if "problem_error" in result:
            raise ProblemError(result["problem_error"])
        if outcome.timed_out:
            raise ProblemError(f"the reference did not finish within {opts.reference_timeout_s:.0f} s (phase {outcome.phase})")
        if "internal_error" in result or outcome.result is None:
            detail = result.get("internal_error") or outcome.stderr_tail[-1500:] or f"exit code {outcome.returncode}"
            raise ProblemError(f"the reference process failed in phase {outcome.phase}: {detail}")
        self.prepared = PreparedProblem(self.source, result, self._exchange, len(self.trial_seeds))
        self.pool.prestart()
        return self.prepared

    # -- the candidate side ---------------------------------------------------------------
    def evaluate(self, candidate: str | Path) -> Evaluation:
        path = Path(candidate)
        text = read_source(path, CandidateFileError, "candidate")
        prepared = self.prepare()
        evaluation = self._new_evaluation(path.resolve())
        if self.options.guard and not static_guard(evaluation, text, self.options.policy):
            evaluation.diagnosis = diagnose(evaluation, text)
            return evaluation  # cheating by its source: it never runs
        # On a GPU no worker starts while another is timed (its start-up would disturb the
        # timing): the next spare starts once this candidate's worker is done.
        marks = [("", time.perf_counter())]
        worker = self.pool.take(keep_spare=self.spare and self.device == "cpu")
        marks.append(("wait_worker_s", time.perf_counter()))
        try:
            for name in prepared.names:
                shutil.copy(prepared.exchange / f"inputs_{name}.pt", worker.workdir / f"inputs_{name}.pt")
            shutil.copy(prepared.exchange / "init_inputs.pt", worker.workdir / "init_inputs.pt")
            marks.append(("copy_inputs_s", time.perf_counter()))
            job = {
                "kind": "candidate",
                "candidate_path": str(path.resolve()),
                "device": self.device,
                "precision": self.options.precision,
                "eval_mode": self.options.eval_mode,
                "init_seed": self.init_seed,
                "trial_seeds": self.trial_seeds,
                "probe_seed": self.probe_seed,
                "output_meta": prepared.output_meta,
                "timing": {"trials": self.options.timing_trials, "budget_s": self.options.timing_budget_s}
                if self.device != "cpu" else None,
            }
            self.progress(f"candidate: {path.name} in a fresh worker")
            outcome = worker.run(job, self.options.timeout_s)
            marks.append(("worker_s", time.perf_counter()))
            if self.spare and self.device != "cpu":
                self.pool.prestart()
            self._judge(evaluation, outcome, worker.workdir)
            if self.device.startswith("cuda"):
                torch.cuda.empty_cache()  # the comparisons' memory goes back before the next candidate runs
            marks.append(("judge_s", time.perf_counter()))
        finally:
            worker.close()
        self._run_tools(evaluation, path)
        marks.append(("tools_s", time.perf_counter()))
        evaluation.diagnosis = diagnose(evaluation, text)
        marks.append(("diagnose_s", time.perf_counter()))
        # where the evaluation's time went on this side of the worker (the worker's own phases are above)
        evaluation.durations_s.update({f"parent_{name}": round(t1 - t0, 3)
                                       for (_, t0), (name, t1) in zip(marks, marks[1:])})
        return evaluation

    def _run_tools(self, evaluation: Evaluation, path: Path) -> None:
        """--ncu: Nsight Compute on a working candidate; --sanitize: compute-sanitizer on a crashing
        or wrong one (the interpreter cannot see out-of-bounds accesses; memcheck can)."""
        ncu = self.options.ncu and evaluation.status == "ok"
        sanitize = self.options.sanitize and evaluation.status in ("runtime_error", "crash", "wrong_output")
        if self.options.ncu and not ncu:
            evaluation.tools["ncu"] = {"error": f"not run: Nsight Compute profiles working candidates "
                                                f"(this one is {evaluation.status})"}
        if self.options.sanitize and not sanitize:
            evaluation.tools["sanitizer"] = {"error": f"not run: the sanitizer re-runs crashing or wrong candidates "
                                                      f"(this one is {evaluation.status})"}
        if not (ncu or sanitize):
            return
        from kfoundry.evaluate.tools import run_tools

        self.progress("re-running the candidate under " + " and ".join(
            name for name, on in (("Nsight Compute", ncu), ("compute-sanitizer", sanitize)) if on))
        evaluation.tools.update(run_tools(self, path.resolve(), ncu=ncu, sanitize=sanitize))

    def _new_evaluation(self, candidate: Path) -> Evaluation:
        prepared = self.prepared
        opts = self.options
        torch_version, triton_version = _versions()
        evaluation = Evaluation(
            status="ok",
            message="",
            problem=str(self.source.path),
            candidate=str(candidate),
            device=self.device,
            warnings=list(prepared.warnings),
            cost=prepared.cost,
            device_facts=prepared.device_facts,
        )
        evaluation.correctness = CorrectnessReport(
            seeds=list(self.trial_seeds), init_seed=self.init_seed, tolerance=opts.atol,
            precision=opts.precision, ground_truth=prepared.truth_status,
        )
        evaluation.timing = TimingReport(
            device=prepared.device_facts.name, device_uuid=prepared.device_facts.uuid,
            torch_version=torch_version, triton_version=triton_version, method=TIMING_METHOD,
        )
        if self.device == "cpu":
            evaluation.timing.reason = CPU_TIMING_REASON
            evaluation.timing.method = ""
        evaluation.settings = {
            "precision": opts.precision, "trials": opts.trials, "tolerance": opts.atol, "seed": self.base_seed,
            "eval_mode": opts.eval_mode, "set": self.source.overrides, "timeout_s": opts.timeout_s,
            "policy": opts.policy,
            "timing_trials": opts.timing_trials, "baselines": list(opts.baselines),
            "python": platform.python_version(), "torch": torch_version, "triton": triton_version,
        }
        return evaluation

    def _judge(self, evaluation: Evaluation, outcome: WorkerOutcome, workdir: Path) -> None:
        times = outcome.phase_times
        evaluation.phase = outcome.phase if outcome.phase not in ("ready", "start") else "load"
        evaluation.durations_s = _durations(times, outcome.elapsed_s, self.reference_seconds,
                                            wait_s=outcome.wait_s, exit_s=outcome.exit_s)
        result = outcome.result
        if outcome.timed_out:
            evaluation.status = "timeout"
            evaluation.message = (f"the candidate did not finish within {self.options.timeout_s:g} s "
                                  f"(it was in phase {evaluation.phase})")
            return
        if result is None or "internal_error" in result:
            evaluation.status = "crash"
            died = (f"killed by {outcome.signal_name}" if outcome.signal_name
                    else f"exited with code {outcome.returncode}")
            tail = outcome.stderr_tail.strip().splitlines()[-8:]
            detail = result.get("internal_error") if result else None
            evaluation.message = (f"the candidate's worker process {died} in phase {evaluation.phase}"
                                  + (f": {detail}" if detail else "")
                                  + ("\n" + "\n".join(tail) if tail else ""))
            evaluation.error = {"returncode": outcome.returncode, "signal": outcome.signal_name,
                                "phase": evaluation.phase, "stderr_tail": outcome.stderr_tail}
            return
        if result.get("status") in ("compile_error", "runtime_error"):
            evaluation.status = result["status"]
            evaluation.message = result["message"]
            evaluation.error = result.get("error")
            return
        self._notes: dict[str, tuple[str, list[str]]] = {}
        evaluation.profile = result.get("profile") or {}
        evaluation.guard.setdefault("kernel_names", (result.get("guard") or {}).get("kernel_names", []))
        self._check_outputs(evaluation, workdir)
        self._check_repeat(evaluation, workdir)
        if evaluation.status == "ok" and self.options.guard:
            dynamic_guard(self, evaluation, result.get("guard") or {}, workdir)
        if evaluation.status == "ok" and "timing" in result:
            self._check_timing(evaluation, result["timing"], workdir)
            if evaluation.status == "ok" and self.options.guard:
                timing_guard(self, evaluation)
        self._note_warnings(evaluation)
        if evaluation.status == "ok":
            evaluation.message = self._ok_message(evaluation)

    def changed_input(self, name: str, data: dict[str, Any]) -> int | None:
        """The first input the candidate changed in place where the reference does not change it."""
        after = data.get("inputs_after") or []
        changed = _inputs_changed(self.prepared.inputs[name], after)
        if changed is None:
            return None
        reference_after = self.prepared.expected[name].get("inputs_after") or []
        return None if _inputs_changed(reference_after, after) is None else changed

    def compare(self, name: str, data: dict[str, Any]) -> Comparison:
        """The candidate's output on input set `name` against the expected one."""
        expected = self.prepared.expected[name]
        args = (data["output"], expected["reference"], expected["truth"], self.options.atol, self.options.atol,
                expected["index_sources"])
        if self.device.startswith("cuda"):
            # on this evaluator's GPU: nothing else runs there while a verdict is judged
            try:
                return compare_outputs(*args, device=self.device)
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
        return compare_outputs(*args)

    def _compare_trial(self, evaluation: Evaluation, k: int, data: Any, label: str) -> bool:
        report = evaluation.correctness
        if not isinstance(data, dict) or "output" not in data:
            return self._fail(evaluation, f"{label}: the worker returned no output", k)
        changed = self.changed_input(str(k), data)
        if changed is not None:
            message = f"{label}: forward changed its input {changed} in place, which the reference does not do"
            if not self.options.guard:
                return self._fail(evaluation, message, k)
            fail_with(evaluation, [Finding("input-mutation", message)])
            evaluation.correctness.failed_trial = k
            return False
        comparison = self.compare(str(k), data)
        for attr in ("max_abs_error", "max_rel_error", "mismatch_fraction", "error_ratio_candidate",
                     "error_ratio_reference"):
            value = comparison.worst(attr)
            if value is not None:
                setattr(report, attr, max(value, getattr(report, attr) or 0.0))
        if not comparison.passed:
            report.failed_output = comparison.failed_output
            failed = comparison.outputs[-1] if comparison.outputs else None
            report.first_bad_index = failed.first_bad_index if failed else None
            evaluation.error_pattern = self._error_pattern(str(k), data, comparison.failed_output)
            return self._fail(evaluation, f"{label}: {comparison.message}", k)
        if comparison.message:
            kind = re.sub(r"\d[\d.e+-]*", "#", comparison.message)
            self._notes.setdefault(kind, (comparison.message, []))[1].append(label)
        return True

    def _error_pattern(self, name: str, data: dict[str, Any], index: int | None) -> dict[str, Any] | None:
        """What the wrong output looks like (kfoundry.diagnose.numeric), for the diagnosis."""
        if index is None:
            return None
        expected = self.prepared.expected[name]
        candidate, reference = flatten_outputs(data["output"]), flatten_outputs(expected["reference"])
        truth = flatten_outputs(expected["truth"]) if expected.get("truth") is not None else None
        if index >= min(len(candidate), len(reference)):
            return None
        c, r = candidate[index], reference[index]
        t = truth[index] if truth is not None and len(truth) == len(reference) else None
        if not (isinstance(c, torch.Tensor) and isinstance(r, torch.Tensor)):
            return None
        try:
            pattern = error_pattern(c, r, self.options.atol, self.options.atol,
                                    t if isinstance(t, torch.Tensor) else None)
        except Exception as exc:  # evidence for the diagnosis, never a reason to lose the verdict
            return {"error": f"{type(exc).__name__}: {exc}"}
        pattern["output"], pattern["input_set"] = index, name
        return pattern

    def _check_repeat(self, evaluation: Evaluation, workdir: Path) -> None:
        """Trial 0 ran twice with the same inputs and seed: different results mean a race."""
        try:
            first, second = _load(workdir / "outputs_0.pt"), _load(workdir / "repeat_0.pt")
        except Exception:
            return
        pairs = zip(flatten_outputs(first.get("output")), flatten_outputs(second.get("output")))
        for index, (a, b) in enumerate(pairs):
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape:
                found = nondeterminism(a, b)
                if found:
                    found["output"] = index
                    found["tolerance"] = self.options.atol
                    found["garbage_only"] = _garbage_only(a, b)
                    evaluation.repeat = found
                    return

    def _note_warnings(self, evaluation: Evaluation) -> None:
        """One warning per kind of note (e.g. passed by the float64 arbiter), naming the checks."""
        for first_message, labels in self._notes.values():
            text = f"{labels[0]}: {first_message}"
            if len(labels) > 1:
                text += f" (likewise in {', '.join(labels[1:])})"
            if "float64 truth" in first_message:
                text += "; the PyTorch reference itself is imprecise here (TF32 convolutions?)"
            evaluation.warnings.append(text)
        self._notes = {}

    def _fail(self, evaluation: Evaluation, message: str, trial: int) -> bool:
        evaluation.status = "wrong_output"
        evaluation.correctness.failed_trial = trial
        evaluation.message = message + f" [reproduce with --seed {self.base_seed}]"
        return False

    def _check_outputs(self, evaluation: Evaluation, workdir: Path) -> None:
        report = evaluation.correctness
        for k in range(len(self.trial_seeds)):
            try:
                data = _load(workdir / f"outputs_{k}.pt")
            except Exception as exc:
                self._fail(evaluation, f"trial {k}: its output could not be read back as plain tensors "
                           f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})", k)
                return
            report.trials += 1
            if not self._compare_trial(evaluation, k, data, f"trial {k}"):
                return
            report.trials_passed += 1

    def _check_timing(self, evaluation: Evaluation, timing: dict[str, Any], workdir: Path) -> None:
        try:
            data = _load(workdir / "timing_output.pt")
        except Exception as exc:
            self._fail(evaluation, f"timing: the last timed output could not be read back ({exc})", 0)
            return
        if not self._compare_trial(evaluation, 0, data, "the last timed run"):
            return
        report = evaluation.timing
        stats = _stats(timing["stats"])
        report.candidate = stats
        report.runtime_ms = stats.median_ms
        report.trials = stats.trials
        report.candidate_peak_memory_bytes = timing.get("peak_memory_bytes")
        if stats.host_flagged_trials:
            evaluation.warnings.append(
                f"timing: {stats.host_flagged_trials} of {stats.trials} trials took far longer by the host clock "
                "than by CUDA events (work on another stream?): host time was used for them")
        baselines = self.prepared.baselines or {}
        report.baselines = {name: _stats(data) for name, data in baselines.get("stats", {}).items()}
        report.baseline_errors = dict(baselines.get("errors", {}))
        report.baselines_cached = bool(baselines.get("cached"))
        report.reference_peak_memory_bytes = baselines.get("peak_memory_bytes")
        eager, compiled = report.baselines.get("eager"), report.baselines.get("compile")
        if eager:
            report.eager_ms = eager.median_ms
            report.speedup_eager = eager.median_ms / stats.median_ms
        if compiled:
            report.compile_ms = compiled.median_ms
            report.speedup_compile = compiled.median_ms / stats.median_ms

    def _ok_message(self, evaluation: Evaluation) -> str:
        c, t = evaluation.correctness, evaluation.timing
        text = (f"correct on {c.trials} trials ({c.precision}, atol=rtol={c.tolerance:g}, "
                f"max abs error {c.max_abs_error:.3g})" if c.max_abs_error is not None
                else f"correct on {c.trials} trials")
        if t.runtime_ms is not None:
            text += f"; {t.runtime_ms:.4g} ms median over {t.trials} trials on {t.device}"
            if t.speedup_eager is not None:
                text += f", {t.speedup_eager:.3g}x vs eager"
            if t.speedup_compile is not None:
                text += f", {t.speedup_compile:.3g}x vs torch.compile"
        else:
            text += f"; not timed ({t.reason})"
        return text

    def close(self) -> None:
        self.pool.close()
        if self._exchange is not None:
            shutil.rmtree(self._exchange, ignore_errors=True)
            self._exchange = None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _durations(times: dict[str, float], elapsed: float, reference_s: float, *, wait_s: float | None = None,
               exit_s: float | None = None) -> dict[str, float]:
    """Seconds per phase of the candidate's worker (load covers import and Triton set-up); worker_wait_s:
    the job waiting for the worker to be ready, worker_exit_s: the process ending after its result."""
    order = ["start", "load", "init", "compile", "correctness", "guard", "timing", "end"]
    marks = [(name, times[name]) for name in order if name in times]
    out = {"reference_s": round(reference_s, 3), "candidate_total_s": round(elapsed, 3)}
    if wait_s is not None:
        out["worker_wait_s"] = wait_s
    if exit_s is not None:
        out["worker_exit_s"] = exit_s
    for (name, t0), (_, t1) in zip(marks, marks[1:]):
        if name != "start":
            out[f"{name}_s"] = round(t1 - t0, 3)
    return out


def evaluate(problem: str | Path, candidate: str | Path, options: EvalOptions | None = None,
             progress: Progress | None = None, **settings: Any) -> Evaluation:
    """Evaluate one candidate file against one problem file; see EvalOptions for the settings."""
    if options is None:
        options = EvalOptions(**settings)
    elif settings:
        raise TypeError("give either options or keyword settings, not both")
    with Evaluator(problem, options, progress, spare=False) as evaluator:
        return evaluator.evaluate(candidate)


__all__ = ["Evaluator", "evaluate"]
