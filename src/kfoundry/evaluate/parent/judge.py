"""The parent's handles on the two processes of the reference side: the judge (expected outputs,
comparisons; kfoundry.evaluate.reference.judge_job) and the baseline process (eager and torch.compile timings;
kfoundry.evaluate.reference.baseline_job). Neither ever imports a candidate."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from kfoundry.errors import EnvironmentFault, KFoundryError, ProblemError
from kfoundry.evaluate.parent import environment_faults as faults
from kfoundry.evaluate.parent.process import Worker, WorkerEnded, WorkerOutcome

Progress = Callable[[str], None]
ANSWER_TIMEOUT_S = 900.0  # one order: a recomputed set of a large problem on the CPU can take minutes
JUDGE_PROCESS = "the judge process (it computes the expected outputs)"
BASELINE_PROCESS = "the baseline process (it times eager and torch.compile)"


class JudgeGone(RuntimeError):
    """The judge process ended or stopped answering: no verdict can be given."""


class Judge:
    """One judge process. `ask` may be called from several threads at once: each order carries an id, a
    reader thread hands each answer to the thread that asked, and the judge serves several orders at a
    time (kfoundry.evaluate.reference.judge_job), so one order that waits for the GPU holds back no other."""

    def __init__(self, device: str, memory_limit_bytes: int | None, extra_env: dict[str, str]) -> None:
        self.worker = Worker(device, label="judge", memory_limit_bytes=memory_limit_bytes, extra_env=extra_env)
        self._state = threading.Lock()  # the next id, the waiting orders, and one order's line at a time
        self._next = 0
        self._waiting: dict[int, Future] = {}
        self._gone: str | None = None
        self._reader: threading.Thread | None = None
        self.phases: dict[str, float] = {}

    def _receive(self, timeout_s: float, keep: bool = True) -> dict[str, Any] | None:
        try:
            return self.worker.receive(timeout_s, keep=keep)
        except WorkerEnded:
            raise JudgeGone(self._death()) from None

    def _death(self) -> str:
        self.worker.process.poll()
        oom = self.worker.guard.exceeded() if self.worker.guard else None
        if oom:
            return f"the judge ran out of host memory ({oom / 1e9:.1f} GB)"
        tail = self.worker.stderr_tail()[-1500:]
        return f"the judge process ended (exit code {self.worker.process.returncode})" + (f": {tail}" if tail else "")

    def prepare(self, job: dict[str, Any], timeout_s: float, progress: Progress,
                on_plan: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
        """Send the problem; wait for the judge's prepared record (or a ProblemError). `on_plan` answers the
        judge's `plan` request (GPU: the memory it measured -> the tier, or {"refuse": why})."""
        self.worker.send(job)
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProblemError(f"the reference did not finish within {timeout_s:.0f} s "
                                   f"(phase {next(reversed(self.phases), 'start')})")
            try:
                message = self._receive(left)
            except JudgeGone as exc:
                raise self._ended(str(exc)) from None
            if message is None:
                continue
            if message.get("request") == "plan":
                try:
                    reply = on_plan(message) if on_plan else {"tier": "per_set", "truth": "device"}
                except ProblemError as exc:
                    reply = {"refuse": str(exc)}
                self.worker.send({"reply": message.get("id"), **reply})
                continue
            if "phase" in message:
                self.phases[message["phase"]] = message.get("t", 0.0)
                label = {"inputs": "inputs", "expected": "expected outputs and their float64 truth"}.get(
                    message["phase"])
                if label:
                    progress(f"reference: {label}")
            if "prepared" in message:
                self._reader = threading.Thread(target=self._answers, daemon=True, name="kfoundry-judge-answers")
                self._reader.start()
                return message["prepared"]
            if "result" in message:
                raise self._failed(message["result"] or {}, job)

    def _ended(self, death: str) -> KFoundryError:
        """The judge ended while preparing: before the problem's code ran (the environment's fault, e.g. an
        import of ours that fails), or with CUDA unable to start; otherwise the problem's."""
        self.worker.process.poll()
        output = self.worker.stderr_tail()
        if "load" not in self.phases and not (self.worker.guard and self.worker.guard.exceeded()):
            code = self.worker.process.returncode
            return faults.start_fault(JUDGE_PROCESS, f"exited with code {code}", output)
        cuda = faults.cuda_start_failure(output)
        if cuda is not None:
            return faults.cuda_fault(JUDGE_PROCESS, cuda)
        return ProblemError(f"the reference process failed: {death}")

    def _failed(self, result: dict[str, Any], job: dict[str, Any]) -> KFoundryError:
        """The judge's record of a failed preparation -> the problem's error, or the environment's fault."""
        text = str(result.get("problem_error") or result.get("internal_error") or result)
        if "problem_error" not in result and "load" not in self.phases:
            return faults.start_fault(JUDGE_PROCESS, "failed", str(result.get("traceback") or ""), text)
        fault = environment_fault(result, str(job.get("device", "")), job.get("problem_path"), JUDGE_PROCESS,
                                  "the reference (the problem's Model, in the judge process)")
        if isinstance(fault, EnvironmentFault):
            return fault
        if "problem_error" in result:
            return ProblemError(text + (f" [GPU memory: {fault}]" if fault else ""))
        return ProblemError(f"the reference process failed: {text}")

    def _answers(self) -> None:
        """Hand each answer to the order that waits for it, until the judge ends."""
        while True:
            try:
                message = self._receive(1.0, keep=False)  # hundreds of answers a minute: none is kept
            except JudgeGone as gone:
                with self._state:
                    self._gone = str(gone)
                    waiting, self._waiting = self._waiting, {}
                for future in waiting.values():
                    future.set_exception(JudgeGone(str(gone)))
                return
            if message is None or "answer" not in message:
                continue
            with self._state:
                future = self._waiting.pop(message["answer"], None)
            if future is not None:
                future.set_result(message)

    def ask(self, op: str, **data: Any) -> dict[str, Any]:
        future: Future = Future()
        with self._state:
            if self._gone is not None:
                raise JudgeGone(self._gone)
            self._next += 1
            ident = self._next
            self._waiting[ident] = future
            sent = self.worker.send({"op": op, "id": ident, **data})
        if not sent:
            with self._state:
                self._waiting.pop(ident, None)
            raise JudgeGone(self._death())
        try:
            return future.result(timeout=ANSWER_TIMEOUT_S)
        except FutureTimeout:
            self.worker.kill()
            raise JudgeGone(f"the judge did not answer {op} within {ANSWER_TIMEOUT_S:.0f} s") from None

    def close(self) -> None:
        if self.worker.process.poll() is None:
            with self._state:
                self.worker.send({"op": "close"})
        self.worker.close()
        if self._reader is not None:
            self._reader.join(timeout=5)


class Baselines:
    """The baseline process, run beside the candidates' pipeline; `result()` waits for its record,
    `available(names)` only for the named baselines (the job reports each one as it is measured)."""

    def __init__(self, device: str, job: dict[str, Any], timeout_s: float, memory_limit_bytes: int | None,
                 extra_env: dict[str, str], progress: Progress, worker: Worker | None = None) -> None:
        self.progress = progress
        self._done = threading.Event()
        self._record: dict[str, Any] | None = None
        self._so_far: dict[str, dict[str, Any]] = {"stats": {}, "errors": {}}
        self._changed = threading.Condition()
        self._peak: int | None = None
        self.seconds: float | None = None
        self._names = list(job.get("timing", {}).get("baselines", []))
        self.fault: EnvironmentFault | None = None  # the process failed for the environment: no verdict stands
        # a worker started early (`baseline_worker`) has its imports done by now
        self._worker = worker or baseline_worker(device, memory_limit_bytes, extra_env)
        self._thread = threading.Thread(target=self._run, args=(job, timeout_s), daemon=True,
                                        name="kfoundry-baselines")
        self._thread.start()

    def _run(self, job: dict[str, Any], timeout_s: float) -> None:
        started = time.monotonic()
        try:
            outcome = self._worker.run(job, timeout_s, on_phase=self._phase, on_request=self._measured)
            self.fault = baseline_fault(outcome, str(job.get("device", "")), job.get("problem_path"))
            self._record = _baseline_record(outcome, timeout_s)
        except Exception as exc:  # noqa: BLE001 -- a failed baseline leaves candidates unscored, not unjudged
            self._record = {"stats": {}, "errors": {"baselines": f"{type(exc).__name__}: {exc}"}}
        finally:
            self.seconds = round(time.monotonic() - started, 3)
            self._worker.close()
            with self._changed:
                self._done.set()
                self._changed.notify_all()

    def _measured(self, message: dict[str, Any]) -> dict[str, Any]:
        """The job's report of one baseline, measured or failed, before the others are done."""
        if message.get("request") != "baseline" or not isinstance(message.get("name"), str):
            return {"error": "the baseline process asks only to report a baseline"}
        with self._changed:
            if isinstance(message.get("stats"), dict):
                self._so_far["stats"][message["name"]] = message["stats"]
                if message.get("peak_memory_bytes") is not None:
                    self._peak = message["peak_memory_bytes"]
            else:
                self._so_far["errors"][message["name"]] = str(message.get("error"))
            self._changed.notify_all()
        return {"ok": True}

    def available(self, names: tuple[str, ...] | list[str]) -> dict[str, Any]:
        """The record once every one of `names` is measured or has failed: the whole record if the process
        is done, otherwise what it has reported so far, with `pending` naming the baselines still to come."""
        with self._changed:
            self._changed.wait_for(lambda: self._done.is_set() or all(
                name in self._so_far["stats"] or name in self._so_far["errors"] for name in names))
        if self.fault is not None:
            raise self.fault
        return self.so_far()

    def so_far(self) -> dict[str, Any]:
        """What is measured by now, without waiting: the whole record once the process is done, otherwise
        what it has reported, with `pending` naming the baselines still to come."""
        with self._changed:
            if not self._done.is_set():
                stats, errors = dict(self._so_far["stats"]), dict(self._so_far["errors"])
                return {"stats": stats, "errors": errors, "cached": False, "peak_memory_bytes": self._peak,
                        "pending": [n for n in self._names if n not in stats and n not in errors]}
        return self._record or {"stats": {}, "errors": {}}  # never raises: a candidate's request reads it

    def _phase(self, phase: str) -> None:
        if phase.startswith("baseline "):
            self.progress(f"reference: baselines ({phase.removeprefix('baseline ')})")

    def result(self) -> dict[str, Any]:
        """The whole record, once the process is done; its EnvironmentFault where it failed for one."""
        self._done.wait()
        if self.fault is not None:
            raise self.fault
        return self._record or {"stats": {}, "errors": {}}

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def close(self) -> None:
        if not self._done.is_set():
            self._worker.kill()
        self._thread.join(timeout=10)


def environment_fault(result: dict[str, Any], device: str, problem_path: str | None, process: str,
                      running: str) -> EnvironmentFault | str | None:
    """A reference process's failed record (problem_error, with its traceback): the environment's fault
    where its import of an installed package failed, CUDA could not start, or processes not ours hold the
    GPU's memory; else, for an out-of-memory on the GPU, who holds that memory (a str for the message)."""
    text = str(result.get("problem_error") or result.get("internal_error") or "")
    trace = str(result.get("traceback") or "")
    failure = faults.import_failure(trace, [problem_path] if problem_path else [])
    if failure is not None:
        return failure.fault(process)
    cuda = faults.cuda_start_failure(f"{text}\n{trace}")
    if cuda is not None:
        return faults.cuda_fault(process, cuda)
    if device.startswith("cuda") and faults.is_gpu_out_of_memory(text):
        verdict = faults.gpu_out_of_memory(text, device, running)
        return verdict.fault or verdict.holders
    return None


def baseline_fault(outcome: WorkerOutcome, device: str, problem_path: str | None) -> EnvironmentFault | None:
    """The environment's fault in the baseline process's outcome, or None (its failures are otherwise the
    problem's, and leave the candidates unscored, not unjudged)."""
    if outcome.timed_out or outcome.out_of_memory_bytes:
        return None
    result = outcome.result or {}
    if (not result or "internal_error" in result) and outcome.phase in ("start", "ready"):
        return faults.start_fault(BASELINE_PROCESS, faults.died(outcome), outcome.stderr_tail,
                                  str(result.get("internal_error") or ""))
    if "problem_error" in result or "internal_error" in result:
        fault = environment_fault(result, device, problem_path, BASELINE_PROCESS,
                                  "the baselines (the problem's Model, in the baseline process)")
        return fault if isinstance(fault, EnvironmentFault) else None
    return None


def baseline_worker(device: str, memory_limit_bytes: int | None, extra_env: dict[str, str]) -> Worker:
    """The baseline process, before its job: started beside the judge, it imports torch meanwhile."""
    return Worker(device, label="baselines", memory_limit_bytes=memory_limit_bytes, extra_env=extra_env)


def _baseline_record(outcome: WorkerOutcome, timeout_s: float) -> dict[str, Any]:
    result = outcome.result or {}
    if outcome.timed_out:
        return {"stats": {}, "errors": {"baselines": f"not finished within {timeout_s:.0f} s"}}
    if outcome.out_of_memory_bytes:
        return {"stats": {}, "errors": {"baselines": f"out of host memory ({outcome.out_of_memory_bytes / 1e9:.1f} GB)"}}
    if "problem_error" in result or "internal_error" in result or not result:
        detail = result.get("problem_error") or result.get("internal_error") or outcome.stderr_tail[-800:]
        return {"stats": {}, "errors": {"baselines": f"the baseline process failed: {detail}"}}
    return result
