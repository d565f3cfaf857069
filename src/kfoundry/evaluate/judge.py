"""The parent's handles on the two processes of the reference side: the judge (expected outputs,
comparisons; kfoundry.evaluate.judge_job) and the baseline process (eager and torch.compile timings;
kfoundry.evaluate.baseline_job). Neither ever imports a candidate."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from kfoundry.errors import ProblemError
from kfoundry.evaluate.process import Worker, WorkerEnded, WorkerOutcome

Progress = Callable[[str], None]
ANSWER_TIMEOUT_S = 900.0  # one order: a recomputed set of a large problem on the CPU can take minutes


class JudgeGone(RuntimeError):
    """The judge process ended or stopped answering: no verdict can be given."""


class Judge:
    """One judge process. `ask` may be called from several threads at once: each order carries an id, a
    reader thread hands each answer to the thread that asked, and the judge serves several orders at a
    time (kfoundry.evaluate.judge_job), so one order that waits for the GPU holds back no other."""

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

    def prepare(self, job: dict[str, Any], timeout_s: float, progress: Progress) -> dict[str, Any]:
        """Send the problem; wait for the judge's prepared record (or a ProblemError)."""
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
                raise ProblemError(f"the reference process failed: {exc}") from None
            if message is None:
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
                result = message["result"] or {}
                if "problem_error" in result:
                    raise ProblemError(result["problem_error"])
                raise ProblemError(f"the reference process failed: {result.get('internal_error') or result}")

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
        # a worker started early (`baseline_worker`) has its imports done by now
        self._worker = worker or baseline_worker(device, memory_limit_bytes, extra_env)
        self._thread = threading.Thread(target=self._run, args=(job, timeout_s), daemon=True,
                                        name="kfoundry-baselines")
        self._thread.start()

    def _run(self, job: dict[str, Any], timeout_s: float) -> None:
        started = time.monotonic()
        try:
            outcome = self._worker.run(job, timeout_s, on_phase=self._phase, on_request=self._measured)
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
        return self.so_far()

    def so_far(self) -> dict[str, Any]:
        """What is measured by now, without waiting: the whole record once the process is done, otherwise
        what it has reported, with `pending` naming the baselines still to come."""
        with self._changed:
            if not self._done.is_set():
                stats, errors = dict(self._so_far["stats"]), dict(self._so_far["errors"])
                return {"stats": stats, "errors": errors, "cached": False, "peak_memory_bytes": self._peak,
                        "pending": [n for n in self._names if n not in stats and n not in errors]}
        return self.result()

    def _phase(self, phase: str) -> None:
        if phase.startswith("baseline "):
            self.progress(f"reference: baselines ({phase.removeprefix('baseline ')})")

    def result(self) -> dict[str, Any]:
        self._done.wait()
        return self._record or {"stats": {}, "errors": {}}

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def close(self) -> None:
        if not self._done.is_set():
            self._worker.kill()
        self._thread.join(timeout=10)


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
