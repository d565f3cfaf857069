"""The evaluation cascade, driven from the parent process (which never imports a candidate and never
holds a problem's tensors).

An Evaluator prepares a problem once — the judge process computes every input set's expected outputs
and keeps them (kfoundry.evaluate.reference.judge_job), the baseline process times eager and torch.compile
beside the candidates — and then judges candidates, several at once: each in a fresh worker taken
from a pool of warm ones (torch imported, CUDA context made). Compiling and checking correctness
overlap; timing runs alone on its GPU (the GPU lock, kfoundry.evaluate.timing.gpu_lock). Memory is
predicted before anything starts (kfoundry.evaluate.parent.memory_plan): a problem too large for the machine
is refused with the figures, and a worker over its budget is ended (kfoundry.evaluate.parent.memory_guard).
"""

from __future__ import annotations

import platform
import random
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Callable

from kfoundry import paths
from kfoundry.diagnose import diagnose
from kfoundry.errors import CandidateFileError, EnvironmentFault, ProblemError, UsageError
from kfoundry.evaluate.parent import target_rows
from kfoundry.evaluate.parent.environment_faults import candidate_fault
from kfoundry.evaluate.parent.guarding import dynamic_guard, fail_with, static_guard, timing_guard
from kfoundry.evaluate.parent.judge import Baselines, Judge, JudgeGone, baseline_worker
from kfoundry.evaluate.parent.memory_guard import reap_cgroups
from kfoundry.evaluate.parent.memory_plan import MemoryPlan, plan, problem_sizes
from kfoundry.evaluate.parent.options import EvalOptions, resolve_device
from kfoundry.evaluate.parent.precision_check import precision_record
from kfoundry.evaluate.parent.process import (READY_TIMEOUT_S, Worker, WorkerOutcome, WorkerPool, problem_environment,
                                              start_servers, work_root)
from kfoundry.evaluate.parent.workdirs import WorkDir, reap
from kfoundry.evaluate.reference.baselines import baseline_key, load_baselines, merged_records
from kfoundry.evaluate.timing.gpu_timer import TIMING_METHOD, trials_budget_s
from kfoundry.guard.findings import Finding
from kfoundry.problem import ProblemSource, read_problem, read_source
from kfoundry.sandbox.secrets import scrub_tree
from kfoundry.types import (CorrectnessReport, DeviceFacts, Evaluation, ProblemCost, ReferenceRounding,
                            TimingReport, TimingStats)

HIDDEN_SETS = ("probe", "outlier")  # input sets the guard uses, never the trials
TIMED_CHECK = "the last timed run"
CPU_TIMING_REASON = "no GPU: the interpreter is not a performance measurement"
Progress = Callable[[str], None]
_reaped = False


def _reap_once() -> None:
    """Leftovers of evaluators that were killed (their folders' locks are free) go, once per process."""
    global _reaped
    if not _reaped:
        _reaped = True
        reap()
        reap_cgroups()


def _versions() -> tuple[str, str | None]:
    import torch

    try:
        import triton

        return torch.__version__, triton.__version__
    except ImportError:
        return torch.__version__, None


def _stats(data: dict[str, Any] | None) -> TimingStats | None:
    return TimingStats(**data) if data else None


class PreparedProblem:
    """What the judge reported of the problem (never its tensors: those stay in the judge)."""

    def __init__(self, source: ProblemSource, result: dict[str, Any], exchange: Path, trials: int,
                 baselines: Baselines | dict[str, Any] | None, plan: MemoryPlan, judge: Judge) -> None:
        self.source = source
        self.exchange = exchange
        self.warnings: list[str] = result["warnings"]
        self.weak: dict[str, bool] = result.get("weak", {})
        self.truth_status: str = result["truth"]
        self.output_meta = result["output_meta"]
        self.cost = ProblemCost(**result["cost"])
        self.device_facts = DeviceFacts(**result["device_facts"])
        self.names = [str(k) for k in range(trials)] + list(HIDDEN_SETS)
        self.input_layouts: dict[str, Any] = result.get("input_layouts") or {}
        self.reference_seconds = result.get("seconds")
        self.sets_seconds = result.get("sets_seconds")  # the expected outputs' share of it
        self.reference_rounding = ReferenceRounding.from_dict(result.get("reference_rounding"))
        self.gpu_memory: dict[str, int] = result.get("gpu_memory") or {}  # the judge's figures once prepared
        self.plan = plan
        self.workers = plan.workers
        self._baselines = baselines
        self._judge = judge

    @property
    def baselines(self) -> dict[str, Any] | None:
        """Eager and torch.compile timings (GPU): waits for the baseline process if it still runs."""
        if isinstance(self._baselines, Baselines):
            return self._baselines.result()
        return self._baselines

    def baselines_for_verdict(self, wait_for_all: bool) -> dict[str, Any] | None:
        """What a verdict reports: all baselines, or once eager is measured whatever is in by then
        (torch.compile's cold compile takes 15-30 s on a large problem, and the pipeline must not
        stall behind it; `pending` then names what came later, see `Evaluator.complete`)."""
        if wait_for_all or not isinstance(self._baselines, Baselines):
            return self.baselines
        return self._baselines.available(["eager"])

    def add_baselines(self, record: dict[str, Any]) -> None:
        """Baselines timed later, by a job of their own, joined to the record verdicts read."""
        current = merged_records(self.baselines or {}, record)
        current.pop("pending", None)
        self._baselines = dict(current, cached=bool((self.baselines or {}).get("cached")))

    def measured_median_ms(self, name: str) -> float | None:
        """A baseline's median if it is measured by now (never waits)."""
        record = self._baselines.so_far() if isinstance(self._baselines, Baselines) else self._baselines
        stats = ((record or {}).get("stats") or {}).get(name)
        return stats.get("median_ms") if isinstance(stats, dict) else None

    def write_inputs(self, name: str, folder: Path) -> Path:
        """Set `name`'s inputs as a file in `folder` (for a replay under a tool)."""
        answer = self._judge.ask("inputs", set=name, folder=str(folder), mode="file")
        if "error" in answer:
            raise RuntimeError(f"the judge could not write the inputs: {answer['error']}")
        return folder / answer["file"]


class CandidateChecks:
    """What the judge said of one candidate's outputs, check by check, as they came in."""

    def __init__(self) -> None:
        self.answers: dict[str, dict[str, Any]] = {}
        self.failed: str | None = None  # the check that ended the evaluation early
        self.notes: dict[str, tuple[str, list[str]]] = {}  # kinds of passing notes -> (first message, checks)
        self.judge_seconds = {"judge_lock_wait_s": 0.0, "judge_serve_s": 0.0}  # summed over its orders

    def timed(self, answer: dict[str, Any]) -> dict[str, Any]:
        self.judge_seconds["judge_lock_wait_s"] += float(answer.pop("lock_wait_s", 0.0) or 0.0)
        self.judge_seconds["judge_serve_s"] += float(answer.pop("serve_s", 0.0) or 0.0)
        parts = answer.pop("serve_parts", None)  # where a comparison's serving went (judge_job._compare)
        for name, seconds in (parts.items() if isinstance(parts, dict) else ()):
            key = f"judge_{name}_s"
            self.judge_seconds[key] = self.judge_seconds.get(key, 0.0) + float(seconds or 0.0)
        return answer

    def record(self, label: str, answer: dict[str, Any]) -> dict[str, Any]:
        self.answers[label] = answer
        wrong = "error" in answer or answer.get("changed_input") is not None or not answer.get("passed")
        if wrong and (label.startswith("trial ") or label == TIMED_CHECK):
            self.failed = label
            return {"stop": True, "reason": f"{label} failed"}
        return {"ok": True}

    def passed(self, label: str) -> bool | None:
        answer = self.answers.get(label)
        if answer is None or "error" in answer:
            return None
        return bool(answer.get("passed"))


class Evaluator:
    """Evaluates candidates for one problem; `evaluate` may be called from several threads at once
    (up to `slots` candidates run together)."""

    def __init__(self, problem: str | Path, options: EvalOptions | None = None, progress: Progress | None = None,
                 spare: bool = True, wait_baselines: bool = False):
        self.spare = spare  # keep workers started ahead for the next candidates
        # a verdict waits for every baseline (one candidate), or only for eager (a pipeline: see complete())
        self.wait_baselines = wait_baselines
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
        self.prepared: PreparedProblem | None = None
        self.plan: MemoryPlan | None = None
        self.reference_seconds = 0.0
        # --sandbox strict closes /dev/shm to workers, and CUDA IPC needs it: outputs cross as files
        self.transport = "file" if self.device == "cpu" or self.options.sandbox == "strict" else self.options.transport
        self.memory_limit: int | None = None  # each candidate worker's budget, once planned
        self.pool: WorkerPool | None = None
        self.judge: Judge | None = None
        self._exchange: WorkDir | None = None
        self._slots: threading.Semaphore | None = None
        self._gpu_plan: MemoryPlan | None = None  # the plan the judge's measurement chose (GPU)
        self._prepare_lock = threading.Lock()
        self._sandbox_warned = False
        # an environment fault ends every evaluation of this evaluator: those running, and any asked for later
        self._fault: EnvironmentFault | None = None
        self._running: set[Worker] = set()
        self._running_lock = threading.Lock()
        _reap_once()

    @property
    def slots(self) -> int:
        """How many candidates this evaluator runs at once (known once the memory is planned)."""
        return self.plan.workers if self.plan else 1

    # -- the reference side ---------------------------------------------------------------
    def _plan(self) -> MemoryPlan:
        from kfoundry.evaluate.parent.host_memory import host_available

        if self.options.memory_limit_bytes:
            available, source = self.options.memory_limit_bytes, "--memory-limit"
        else:
            available, source = host_available()
        try:
            sizes = problem_sizes(self.source, self.options.precision, self.options.eval_mode)
        except Exception as exc:  # noqa: BLE001 -- a problem that cannot be sized is still evaluated
            from kfoundry.evaluate.parent.memory_plan import ProblemSizes

            self.progress(f"memory: the problem could not be sized on the meta device ({type(exc).__name__})")
            sizes = ProblemSizes(0, 0, 0, 0, 0, 0)
        self.host_available = (available, source)
        self.sizes = sizes
        # on a GPU this checks the host alone: the GPU's part is planned when the judge has measured it
        return plan(sizes, self.device, len(self.trial_seeds) + len(HIDDEN_SETS), available, source,
                    workers=self.options.workers, transport=self.transport, tier=self.options.forced_tier)

    def _plan_gpu(self, request: dict[str, Any]) -> dict[str, Any]:
        """The judge's `plan` request: the GPU memory free once it holds its context and the model (counted in
        the plan, so given back to the figure) -> where it keeps the sets and makes the truth."""
        free = int(request.get("gpu_free", 0)) + int(request.get("judge_allocated", 0))
        try:
            memory = self._gpu_plan_for(free)
        except ProblemError:
            self._others_hold_what_is_missing(free)
            raise
        self._gpu_plan = memory
        if self.pool is not None and self.spare:
            self.pool.resize(memory.spares)  # the spares started before the plan: only as many as it counts
        self.progress(f"memory: {memory.describe()}")
        return {"tier": memory.tier, "truth": memory.truth}

    def _gpu_plan_for(self, free: int) -> MemoryPlan:
        return plan(self.sizes, self.device, len(self.trial_seeds) + len(HIDDEN_SETS), *self.host_available,
                    gpu_free=free, workers=self.options.workers, transport=self.transport,
                    tier=self.options.forced_tier)

    def _others_hold_what_is_missing(self, free: int) -> None:
        """A GPU too short for the problem only because other processes hold its memory is the environment's
        fault, not the problem's size: raise it as such, naming them."""
        from kfoundry.evaluate.parent.environment_faults import OTHERS_MIN_BYTES, others_on_device

        others = others_on_device(self.device)
        if others.held < OTHERS_MIN_BYTES:
            return
        try:
            self._gpu_plan_for(free + others.held)
        except ProblemError:
            return  # too large even on the whole GPU: the problem's size
        raise others.fault(f"the GPU has {free / 1e9:.1f} GB free for this problem's evaluation, which needs more,")

    def prepare(self) -> PreparedProblem:
        with self._prepare_lock:
            if self.prepared is None:
                self.prepared = self._prepare()
            return self.prepared

    def _prepare(self) -> PreparedProblem:
        opts = self.options
        started = time.monotonic()
        # the judge's and the candidates' fork servers import while the problem is sized and the judge starts
        start_servers(self.device, {"judge": self._reference_env(), **({} if opts.wrapper else {"candidate": None})})
        self.progress("reference: sizing the problem's memory")
        memory = self._plan()
        available = self.host_available[0]
        # a budget per process: generous, so only a runaway meets it, and never the whole machine
        others = memory.host_terms.get("judge", 0)
        self.memory_limit = int(max(2 << 30, min(0.75 * available, (0.85 * available - others) / memory.workers)))
        judge_limit = self._baseline_limit = int(0.85 * available)
        self._exchange = WorkDir.create("exchange", work_root())
        self.judge = Judge(self.device, judge_limit, self._reference_env())
        # the baseline process starts now and imports while the judge prepares: eager's figure, which it
        # measures first, gates the first verdicts
        early = (baseline_worker(self.device, judge_limit, self._reference_env())
                 if self.device.startswith("cuda") and opts.baselines else None)
        job = {
            "kind": "judge",
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
            "exchange_dir": str(self._exchange.path),
            "cache_dir": str(self.cache_dir),
            "measure_device": opts.measure_device,
            "tier": memory.tier,
            "truth": memory.truth,
        }
        # the spares warm up (imports, CUDA context) while the reference is computed
        self.pool = WorkerPool(self.device, spares=memory.spares if self.spare else 1, refill=self.spare,
                               wrapper=opts.wrapper, memory_limit_bytes=self.memory_limit, sandbox=opts.sandbox,
                               extra_env=self._problem_env())
        self.pool.fill()
        self.progress("reference: starting the judge")
        try:
            result = self.judge.prepare(job, opts.reference_timeout_s, self.progress, on_plan=self._plan_gpu)
        except BaseException:
            if early is not None:
                early.close()
            raise
        self.reference_seconds = time.monotonic() - started
        if self.device.startswith("cuda") and self._gpu_plan is not None:
            memory = self._gpu_plan
            if result.get("gpu_memory"):
                memory = self._fit_gpu(memory, result["gpu_memory"])
        self.plan = memory
        self._slots = threading.Semaphore(memory.workers)
        facts = DeviceFacts(**result["device_facts"])
        baselines = self._start_baselines(facts, judge_limit, early) if self.device.startswith("cuda") else None
        if memory.baselines_first and isinstance(baselines, Baselines):
            # the GPU cannot hold the baselines' forwards beside the candidates' workers: they go first
            self.progress("reference: timing the baselines before the candidates (GPU memory)")
            baselines.result()
        self.progress(f"reference: ready in {self.reference_seconds:.1f} s; {memory.describe()}")
        return PreparedProblem(self.source, result, self._exchange.path, len(self.trial_seeds), baselines,
                               memory, self.judge)

    def _fit_gpu(self, memory: MemoryPlan, gpu: dict[str, int]) -> MemoryPlan:
        """Fewer workers (or the baselines first) where the GPU memory left once the judge has its sets is
        short; the tier and the truth's place stay (the judge holds them now). The judge's figure is given
        back to what is free, since the plan counts it."""
        free = int(gpu["free"]) + int(gpu.get("judge_allocated", 0))
        try:
            return plan(memory.sizes, self.device, memory.sets, *self.host_available, gpu_free=free,
                        workers=memory.workers, transport=memory.transport, tier=memory.tier, truth=memory.truth)
        except ProblemError:  # what the judge measured says less than the plan: one worker, baselines first
            return plan(memory.sizes, self.device, memory.sets, *self.host_available, gpu_free=None,
                        workers=1, transport=memory.transport, tier=memory.tier, truth=memory.truth, first=True)

    def _start_baselines(self, facts: DeviceFacts, limit: int, early: Worker | None,
                         names: list[str] | None = None) -> Baselines | dict[str, Any] | None:
        opts = self.options
        names = list(opts.baselines if names is None else names)
        if not names:
            return None
        key = baseline_key(self.source.content_hash, opts.precision, opts.eval_mode, opts.timing_trials, facts)
        if not opts.no_cache:
            cached = load_baselines(self.cache_dir, key)
            if cached is not None and all(n in cached["stats"] or n in cached["errors"] for n in names):
                if early is not None:
                    early.close()
                cached["cached"] = True
                return cached
        job = {"kind": "baselines", "key": key, "problem_path": str(self.source.path),
               "problem_text": self.source.text, "overrides": self.source.overrides, "device": self.device,
               "precision": opts.precision, "eval_mode": opts.eval_mode, "init_seed": self.init_seed,
               "trial_seeds": self.trial_seeds, "cache_dir": str(self.cache_dir),
               "timing": {"trials": opts.timing_trials, "budget_s": opts.timing_budget_s,
                          "baselines": names, "no_cache": opts.no_cache}}
        return Baselines(self.device, job, opts.reference_timeout_s, limit, self._reference_env(), self.progress,
                         worker=early)

    def _reference_env(self) -> dict[str, str]:
        """The judge's and the baseline process's: torch.compile's cache beside the baselines' (never a
        candidate's, whose workers each have a private one)."""
        # torch.compile compiles in the baseline process itself: its default pool of compile workers (one
        # per core, 0.38 GB each) took 7 GB of host memory on a 16-core H200 host, for a baseline that no
        # verdict waits for (measured: benchmarks/results/archive/eval_throughput-h200-20261201e*.json)
        return {"TORCHINDUCTOR_CACHE_DIR": str(self.cache_dir / "inductor"), "TORCHINDUCTOR_COMPILE_THREADS": "1",
                **self._problem_env()}

    def _problem_env(self) -> dict[str, str]:
        """Every process of this problem's: its folder first on sys.path; the cache closed to candidates."""
        return problem_environment(self.source.path, [self.cache_dir, *map(Path, self.options.private_paths)])

    # -- the candidate side ---------------------------------------------------------------
    def evaluate(self, candidate: str | Path) -> Evaluation:
        path = Path(candidate)
        text = read_source(path, CandidateFileError, "candidate")
        prepared = self.prepare()
        self._stop_for(None)
        evaluation = self._new_evaluation(path.resolve())
        if self.options.guard and not static_guard(evaluation, text, self.options.policy):
            evaluation.diagnosis = diagnose(evaluation, text)
            return evaluation  # cheating by its source: it never runs
        marks = [("", time.perf_counter())]
        with self._slots:
            marks.append(("wait_slot_s", time.perf_counter()))
            self._stop_for(None)  # a fault met while this one waited for its slot
            worker = self.pool.take()
            with self._running_lock:
                self._running.add(worker)
            marks.append(("wait_worker_s", time.perf_counter()))
            checks = CandidateChecks()
            judge_time = [0.0]
            try:
                import shutil

                self._check_sandbox(worker)
                shutil.copy(prepared.exchange / "init_inputs.pt", worker.workdir / "init_inputs.pt")
                copy = worker.copy_in(path)
                target = self.options.static_target if self.device == "cpu" else None
                source = copy.read_bytes() if target else b""  # what the worker imports, read before it runs
                rewrite = {str(copy): str(path.resolve())}  # messages name the user's file, not the copy
                job = {
                    "kind": "candidate",
                    "candidate_path": str(copy),
                    "overrides": self.source.overrides,  # the problem's --set values, for the candidate's copies
                    "device": self.device,
                    "precision": self.options.precision,
                    "eval_mode": self.options.eval_mode,
                    "init_seed": self.init_seed,
                    "trial_seeds": self.trial_seeds,
                    "probe_seed": self.probe_seed,
                    "output_meta": prepared.output_meta,
                    "transport": self.transport,
                    "input_layouts": prepared.input_layouts,
                    "timing": {"trials": self.options.timing_trials, "budget_s": self.options.timing_budget_s}
                    if self.device != "cpu" else None,
                    "static_target": target,
                    "guard_runs": self.options.guard_runs,
                    # the target compile's rows this very source got before (target_rows.py): its worker compiles none
                    "target_rows": target_rows.known(self.cache_dir, source, target, _versions())
                    if target and not self.options.no_cache else None,
                }
                name = path.stem
                self.progress(f"candidate {name}: starting")

                def on_phase(phase: str) -> None:
                    if phase in ("compile", "correctness", "guard", "timing"):
                        self.progress(f"candidate {name}: {phase}")

                def on_request(message: dict[str, Any]) -> dict[str, Any]:
                    t0 = time.perf_counter()
                    try:
                        return self._serve(message, worker.workdir, checks)
                    finally:
                        judge_time[0] += time.perf_counter() - t0

                outcome = worker.run(job, self.options.timeout_s, on_request=on_request, on_phase=on_phase)
                marks.append(("worker_s", time.perf_counter()))
                evaluation.sandbox = worker.sandbox
            finally:
                with self._running_lock:
                    self._running.discard(worker)
                worker.close()
        self._stop_for(candidate_fault(outcome, self.device, [str(copy), str(worker.workdir)]))
        self._judge(evaluation, outcome, checks)
        if target and outcome.result and outcome.result.get("target_launches"):
            target_rows.remember(self.cache_dir, source, target, _versions(), outcome.result["target_launches"],
                                 evaluation.profile.get("triton"))
        self._note_sandbox(evaluation)
        # judge_s: this candidate's wait on the judge (queued behind other candidates' orders too)
        evaluation.durations_s["judge_s"] = round(judge_time[0], 3)
        evaluation.durations_s.update({k: round(v, 3) for k, v in checks.judge_seconds.items()})
        marks.append(("judge_s", time.perf_counter()))
        self._run_tools(evaluation, path)
        marks.append(("tools_s", time.perf_counter()))
        # what the candidate printed or raised goes into the diagnosis, prompts and records: no secret in it
        scrub_tree(evaluation, rewrite=rewrite)
        evaluation.diagnosis = diagnose(evaluation, text)
        marks.append(("diagnose_s", time.perf_counter()))
        evaluation.durations_s.update({f"parent_{label}": round(t1 - t0, 3)
                                       for (_, t0), (label, t1) in zip(marks, marks[1:])})
        evaluation.settings["memory"] = {"plan": self.plan.describe(), "tier": self.plan.tier, "truth": self.plan.truth,
                                         "host_bytes": self.plan.host_bytes, "gpu_bytes": self.plan.gpu_bytes or None,
                                         "worker_budget_bytes": self.memory_limit, "guard": outcome.memory_guard}
        self.progress(f"candidate {path.stem}: {evaluation.status}")
        return evaluation

    def _stop_for(self, fault: EnvironmentFault | None) -> None:
        """Raise the environment's fault (this one, or one another evaluation met first); on the first, end
        the workers of the evaluations still running: they would fail the same way, and their candidates
        are not to be charged with it."""
        with self._running_lock:
            if self._fault is None and fault is not None:
                self._fault = fault
                running, self._running = list(self._running), set()
            else:
                running = []
        for worker in running:
            worker.kill()
        if self._fault is not None:
            raise self._fault

    def stop(self, fault: EnvironmentFault) -> None:
        """End this evaluator's running evaluations for a fault met elsewhere (another device's evaluator of
        the same pool): each of them, and every later one, raises it."""
        try:
            self._stop_for(fault)
        except EnvironmentFault:
            pass

    def _check_sandbox(self, worker: Worker) -> None:
        """--sandbox strict: a worker that lacks any restriction runs nothing."""
        if self.options.sandbox != "strict":
            return
        if not worker.wait_ready(READY_TIMEOUT_S) and worker.process.poll() is not None:
            return  # it died before saying anything: its outcome tells why (an environment fault, say)
        missing = worker.sandbox.get("missing") if worker.sandbox else ["the worker reported no sandbox"]
        if missing:
            raise UsageError("--sandbox strict: this machine cannot put every restriction in force, so no candidate "
                             f"runs: {'; '.join(missing)}")

    def _note_sandbox(self, evaluation: Evaluation) -> None:
        """What the kernel lacked, as a warning on the evaluation, and once per run on the progress line."""
        missing = (evaluation.sandbox or {}).get("missing") or []
        if self.options.sandbox == "off":
            missing = ["the sandbox is off (--sandbox off): the candidate ran with the user's full access"]
        for item in missing:
            evaluation.warnings.append(f"sandbox: {item}")
        if missing and not self._sandbox_warned:
            self._sandbox_warned = True
            self.progress(f"warning: the candidates' sandbox is incomplete on this machine: {'; '.join(missing)}; "
                          "the baseline cache and the library are not protected from them")

    def _serve(self, message: dict[str, Any], folder: Path, checks: CandidateChecks) -> dict[str, Any]:
        """One request of a candidate's worker, passed on to the judge (checked fields only)."""
        kind = message.get("request")
        if kind == "trials budget":  # asked right before the timing: eager's median may be in by then
            return {"trials_budget_s": trials_budget_s(self.prepared.measured_median_ms("eager"),
                                                       self.options.timing_trials)}
        names = set(self.prepared.names)
        name = message.get("set")
        if name not in names:
            return {"error": f"unknown input set {name!r}"}
        try:
            if kind == "inputs":
                return checks.timed(self.judge.ask("inputs", set=name, folder=str(folder),
                                                   mode="file" if self.transport == "file" else "ipc"))
            if kind == "fill":
                return checks.timed(self.judge.ask("fill", set=name, buffers=message.get("buffers")))
            if kind == "check":
                label = str(message.get("label", ""))[:60]
                if checks.failed:
                    return {"stop": True, "reason": f"{checks.failed} failed"}
                then = message.get("fill")  # the buffers of the worker's next set, filled after the comparison
                if then is not None and (not isinstance(then, dict) or then.get("set") not in names):
                    return {"error": "a fill must name one of the input sets"}
                answer = self.judge.ask("compare", set=name, folder=str(folder), outputs=message.get("outputs"),
                                        inputs=message.get("inputs"), repeat=message.get("repeat"),
                                        pattern=label.startswith("trial ") or label == TIMED_CHECK,
                                        fill={"set": then["set"], "buffers": then.get("buffers")} if then else None)
                answer.pop("answer", None)
                checks.timed(answer)
                filled = answer.pop("filled", False)
                answer.pop("fill_error", None)  # the worker asks for that set again
                if answer.get("transport") and self.transport == "ipc" and "could not be opened" in answer["error"]:
                    self.transport = "file"  # CUDA IPC does not work here: later candidates use files
                    self.progress("CUDA IPC is unavailable here: outputs cross as files from now on")
                reply = checks.record(label, answer)
                return {**reply, "filled": True} if filled and "stop" not in reply else reply
        except JudgeGone as exc:
            checks.record(str(message.get("label", kind)), {"error": str(exc)})
            return {"stop": True, "reason": str(exc)}
        return {"error": f"unknown request {kind!r}"}

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
        from kfoundry.evaluate.parent.tools import run_tools

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
            reference_rounding=prepared.reference_rounding,
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
        # the options that change a verdict, as resolved for this evaluation, and what it ran on
        evaluation.settings = {
            **opts.verdict_settings(), "device": self.device, "tolerance": opts.atol, "seed": self.base_seed,
            "set": self.source.overrides,
            "python": platform.python_version(), "torch": torch_version, "triton": triton_version,
        }
        return evaluation

    def _judge(self, evaluation: Evaluation, outcome: WorkerOutcome, checks: CandidateChecks) -> None:
        times = outcome.phase_times
        evaluation.phase = outcome.phase if outcome.phase not in ("ready", "start") else "load"
        evaluation.durations_s = _durations(times, outcome.elapsed_s, self.reference_seconds,
                                            wait_s=outcome.wait_s, exit_s=outcome.exit_s)
        result = outcome.result
        # a wrong output is judged while the worker runs on: its dots are counted only where it finished
        evaluation.precision = precision_record(self.device, (result or {}).get("dots"),
                                                ((result or {}).get("guard") or {}).get("compute_ops"))
        if checks.failed is not None:  # judged wrong (or unjudgeable) before the worker finished
            self._check_trials(evaluation, checks)
            if evaluation.status == "ok":  # the timed run's output
                self._check_trial(evaluation, checks, TIMED_CHECK, 0)
            self._note_warnings(evaluation, checks)
            return
        if outcome.out_of_memory_bytes:
            evaluation.status = "crash"
            evaluation.message = (f"out of host memory ({outcome.out_of_memory_bytes / 1e9:.1f} GB, over the "
                                  f"worker's budget of {(self.memory_limit or 0) / 1e9:.1f} GB; {outcome.memory_guard}) "
                                  f"in phase {evaluation.phase}")
            evaluation.error = {"phase": evaluation.phase, "out_of_memory_bytes": outcome.out_of_memory_bytes,
                                "memory_guard": outcome.memory_guard}
            return
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
        evaluation.profile = result.get("profile") or {}
        # where the worker's time went, apart from its phases: compiling, waiting on the GPU lock or the judge
        evaluation.durations_s.update({"worker_" + name.replace(" ", "_") + "_s": float(value)
                                       for name, value in (result.get("seconds") or {}).items()})
        evaluation.guard.setdefault("kernel_names", (result.get("guard") or {}).get("kernel_names", []))
        self._check_trials(evaluation, checks)
        if not self.options.guard_runs:  # its verdict judged no ghost, caching or outlier run: say so
            evaluation.guard["extra_runs_skipped"] = True
        if evaluation.status == "ok" and self.options.guard:
            dynamic_guard(evaluation, result.get("guard") or {}, checks, self.options.policy, self.prepared.weak)
        if evaluation.status == "ok" and "timing" in result:
            self._check_timing(evaluation, result["timing"], checks)
            if evaluation.status == "ok" and self.options.guard:
                timing_guard(evaluation, self.options.policy)
        self._note_warnings(evaluation, checks)
        if evaluation.status == "ok":
            evaluation.message = self._ok_message(evaluation)

    def _check_trials(self, evaluation: Evaluation, checks: CandidateChecks) -> None:
        report = evaluation.correctness
        for k in range(len(self.trial_seeds)):
            label = f"trial {k}"
            if label not in checks.answers:
                if checks.failed is None:
                    self._fail(evaluation, f"{label}: the worker returned no output", k)
                return
            report.trials += 1
            if not self._check_trial(evaluation, checks, label, k):
                return
            report.trials_passed += 1

    def _check_trial(self, evaluation: Evaluation, checks: CandidateChecks, label: str, k: int) -> bool:
        answer = checks.answers.get(label)
        if answer is None:
            return True
        report = evaluation.correctness
        if k == 0 and answer.get("repeat"):
            evaluation.repeat = answer["repeat"]
        if "error" in answer:
            return self._fail(evaluation, f"{label}: the output could not be judged ({answer['error']})", k)
        changed = answer.get("changed_input")
        if changed is not None:
            message = f"{label}: forward changed its input {changed} in place, which the reference does not do"
            if not self.options.guard:
                return self._fail(evaluation, message, k)
            fail_with(evaluation, [Finding("input-mutation", message)])
            evaluation.correctness.failed_trial = k
            return False
        outputs = answer.get("outputs") or []
        for attr in ("max_abs_error", "max_rel_error", "mismatch_fraction", "error_ratio_candidate",
                     "error_ratio_reference"):
            values = [o.get(attr) for o in outputs if o.get(attr) is not None]
            if values:
                setattr(report, attr, max(max(values), getattr(report, attr) or 0.0))
        if not answer.get("passed"):
            report.failed_output = answer.get("failed_output")
            failed = outputs[-1] if outputs else {}
            report.first_bad_index = failed.get("first_bad_index")
            evaluation.error_pattern = answer.get("error_pattern")
            return self._fail(evaluation, f"{label}: {answer.get('message', '')}", k)
        if answer.get("message"):
            kind = re.sub(r"\d[\d.e+-]*", "#", answer["message"])
            checks.notes.setdefault(kind, (answer["message"], []))[1].append(label)
        return True

    def _note_warnings(self, evaluation: Evaluation, checks: CandidateChecks) -> None:
        """One warning per kind of note (e.g. passed by the float64 arbiter), naming the checks."""
        for first_message, labels in checks.notes.values():
            text = f"{labels[0]}: {first_message}"
            if len(labels) > 1:
                text += f" (likewise in {', '.join(labels[1:])})"
            if "float64 truth" in first_message:
                text += "; the PyTorch reference itself is imprecise here (TF32 convolutions?)"
            evaluation.warnings.append(text)

    def _fail(self, evaluation: Evaluation, message: str, trial: int) -> bool:
        evaluation.status = "wrong_output"
        evaluation.correctness.failed_trial = trial
        evaluation.message = message + f" [reproduce with --seed {self.base_seed}]"
        return False

    def _check_timing(self, evaluation: Evaluation, timing: dict[str, Any], checks: CandidateChecks) -> None:
        if not self._check_trial(evaluation, checks, TIMED_CHECK, 0):
            return
        report = evaluation.timing
        stats = _stats(timing["stats"])
        report.candidate = stats
        report.runtime_ms = stats.median_ms
        report.trials = stats.trials
        report.candidate_peak_memory_bytes = timing.get("peak_memory_bytes")
        evaluation.durations_s.update({f"exclusive_{name}": float(seconds) for name, seconds
                                       in (timing.get("exclusive_seconds") or {}).items()})
        if stats.host_flagged_trials:
            evaluation.warnings.append(
                f"timing: {stats.host_flagged_trials} of {stats.trials} trials took far longer by the host clock "
                "than by CUDA events (work on another stream?): host time was used for them")
        self._attach_baselines(report, self.prepared.baselines_for_verdict(self.wait_baselines) or {})

    @staticmethod
    def _attach_baselines(report: TimingReport, baselines: dict[str, Any]) -> None:
        stats = report.candidate
        report.baselines_pending = list(baselines.get("pending", []))
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

    def complete(self, evaluation: Evaluation) -> bool:
        """Fill in the baselines a verdict was given without (waits for the baseline process); True if
        anything changed. Speedups against torch.compile of early verdicts come in this way."""
        return bool(evaluation.timing.baselines_pending) and self.attach_baselines(evaluation)

    def time_baselines(self, names: list[str]) -> bool:
        """Time more baselines now, in a baseline process of their own (the problem's judge and its verdicts
        stay), and join them to the record verdicts read; True where any was measured. Used where a run
        finds that its best needs another comparison, e.g. torch.compile's reduce-overhead mode beside a
        kernel replayed from a CUDA graph."""
        prepared = self.prepared
        missing = [n for n in names if n not in ((prepared.baselines or {}).get("stats") or {})] \
            if prepared is not None else []
        if not missing or self.device == "cpu":
            return False
        started = self._start_baselines(prepared.device_facts, self._baseline_limit, None, missing)
        record = started.result() if isinstance(started, Baselines) else started
        if isinstance(started, Baselines) and started.fault is not None:
            raise started.fault
        prepared.add_baselines(record or {})
        return any(n in ((record or {}).get("stats") or {}) for n in missing)

    def attach_baselines(self, evaluation: Evaluation) -> bool:
        """A timed verdict's baselines read again from the record (after `time_baselines`)."""
        if evaluation.timing.candidate is None or self.prepared is None:
            return False
        self._attach_baselines(evaluation.timing, self.prepared.baselines or {})
        return True

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
        if self.pool is not None:
            self.pool.close()
        if self._baselines_running():
            self.prepared._baselines.close()
        if self.judge is not None:
            self.judge.close()
            self.judge = None
        if self._exchange is not None:
            self._exchange.remove()
            self._exchange = None

    def _baselines_running(self) -> bool:
        return self.prepared is not None and isinstance(self.prepared._baselines, Baselines)

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
    with Evaluator(problem, options, progress, spare=False, wait_baselines=True) as evaluator:
        return evaluator.evaluate(candidate)


__all__ = ["Evaluator", "evaluate"]
