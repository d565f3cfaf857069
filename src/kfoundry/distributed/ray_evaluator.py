"""Evaluation workers as Ray actors, one per GPU (or per CPU slot), behind the surface of an Evaluator.

The driver keeps the search, the LLM calls and the run store; a candidate travels to a free actor as
source text and its evaluation comes back as the same record a local Evaluator makes. An actor (or its
node) that dies takes no result with it: the evaluation goes to another live actor (or the dead one's
replacement), at most `max_retries` times, after which it is recorded as a `crash` that says why.
"""

from __future__ import annotations

import queue
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Self

from kfoundry.distributed.actor import EvaluationWorker
from kfoundry.distributed.cluster import ClusterError, connect, require_ray
from kfoundry.errors import CandidateFileError, KFoundryError, UsageError
from kfoundry.evaluate.parent.evaluator import Progress
from kfoundry.evaluate.parent.options import EvalOptions, resolve_device
from kfoundry.problem import ProblemSource, read_problem, read_source
from kfoundry.types import DeviceFacts, Evaluation, ProblemCost, ReferenceRounding

WAIT_S = 0.25  # how often a caller waiting for a free worker checks whether any is left


@dataclass
class ClusterPrepared:
    """What the reference produced, as the driver sees it (the tensors stay on the workers)."""

    source: ProblemSource
    device_facts: DeviceFacts  # the first worker's device (a cluster may mix GPU models)
    cost: ProblemCost
    warnings: list[str]
    truth_status: str
    weak: dict[str, bool]
    baselines: dict[str, Any] | None
    workers: list[dict[str, Any]] = field(default_factory=list)  # node, device, device_facts of each worker
    reference_rounding: ReferenceRounding = field(default_factory=ReferenceRounding)  # the first worker's


@dataclass
class _Slot:
    index: int
    actor: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    starts: int = 0  # actors started for this slot, replacements included

    @property
    def label(self) -> str:
        return f"worker {self.index} on {self.info.get('node', '?')}"


def _faults(ray: Any) -> tuple[type[BaseException], ...]:
    """Errors that mean the worker (or its node) is gone, not that the candidate or problem is bad."""
    e = ray.exceptions
    return (e.RayActorError, e.WorkerCrashedError, e.NodeDiedError, e.ObjectLostError, e.OutOfMemoryError,
            e.ActorUnschedulableError, e.LocalRayletDiedError, e.GetTimeoutError)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


class RayEvaluator:
    """Evaluates candidates for one problem on Ray actors; `evaluate` is blocking and thread-safe.

    `workers`: how many actors (default: every GPU of the cluster, or 1 on CPU). On GPU each actor takes one
    GPU (`num_gpus=1`) and Ray pins it there (CUDA_VISIBLE_DEVICES); `options.device="cpu"` makes CPU actors
    (`num_cpus=1`), for clusters without GPUs and for tests. Not connected to Ray yet: connects to a local
    instance (see kfoundry.distributed.connect)."""

    def __init__(self, problem: str | Path, options: EvalOptions | None = None, workers: int | None = None,
                 progress: Progress | None = None, *, max_retries: int = 2, call_timeout_s: float | None = None,
                 setup_timeout_s: float | None = None) -> None:
        self.ray = require_ray()
        base = options or EvalOptions()
        base.validate()
        if max_retries < 0:
            raise UsageError("max_retries must be 0 or more")
        self.source = read_problem(problem, base.set_values)
        self.problem_path = str(Path(problem).resolve())
        self.progress = progress or (lambda message: None)
        self.max_retries = max_retries
        if not self.ray.is_initialized():
            connect("ray")
        self.gpu = self._wants_gpu(base)
        self.device = "cuda" if self.gpu else resolve_device("cpu", base.precision)
        # one seed for all workers, replacements included: every worker judges with the same inputs
        seed = base.seed if base.seed is not None else secrets.randbits(31)
        self.options = replace(base, device=self.device, seed=seed)
        self.workers = self._worker_count(workers)
        tools_s = 2 * max(600.0, 2 * base.timeout_s) if (base.ncu or base.sanitize) else 0.0
        self.call_timeout_s = call_timeout_s or 2 * base.timeout_s + tools_s + 600.0
        self.setup_timeout_s = setup_timeout_s or base.reference_timeout_s + 600.0
        self.prepared: ClusterPrepared | None = None
        self._slots: dict[int, _Slot] = {}
        self._free: queue.Queue[_Slot] = queue.Queue()
        self._busy: dict[int, str] = {}  # slot index -> the candidate it is evaluating
        self._live = 0  # slots with a working actor, free or busy
        self._pending = 0  # slots whose replacement is starting
        self._lost: list[str] = []  # why slots that could not be replaced were given up
        self._closed = False
        self._lock = threading.Lock()
        self._prepare_lock = threading.Lock()
        self._remote = self.ray.remote(EvaluationWorker)

    # -- the cluster -----------------------------------------------------------------------------

    def _wants_gpu(self, options: EvalOptions) -> bool:
        gpus = self.ray.cluster_resources().get("GPU", 0)
        if options.device == "cpu":
            return False
        if options.device in (None, "auto"):
            return gpus >= 1
        if options.device == "cuda" or options.device.startswith("cuda:"):
            if gpus < 1:
                raise ClusterError(f"--device {options.device}: the Ray cluster has no GPU (use --device cpu)")
            return True
        raise UsageError(f"unknown device {options.device!r} for a Ray cluster: use cpu or cuda")

    def _worker_count(self, workers: int | None) -> int:
        resources = self.ray.cluster_resources()
        kind = "GPU" if self.gpu else "CPU"
        available = int(resources.get(kind, 0))
        count = workers if workers is not None else (available if self.gpu else 1)
        if count < 1:
            raise UsageError("the number of Ray evaluation workers must be at least 1")
        if count > available:
            raise ClusterError(f"{count} evaluation worker(s) asked, but the Ray cluster has {available} {kind}(s) "
                               "(one worker takes one)")
        return count

    def _new_actor(self) -> Any:
        resources = {"num_gpus": 1, "num_cpus": 1} if self.gpu else {"num_cpus": 1}
        return self._remote.options(max_restarts=0, max_task_retries=0, **resources).remote()

    def _connected(self) -> bool:
        """Ray's API starts a new local Ray instance when called unconnected: after `disconnect()` a
        replacement thread finishing late must not (seen in the tests: the driver then stayed attached to a
        stray instance, and Ray ended the whole process with exit code 1 when that instance went away)."""
        return bool(self.ray.is_initialized())

    def _kill(self, actor: Any) -> None:
        if actor is None or not self._connected():
            return  # disconnected: the actor went with the cluster
        with suppress(Exception):  # already gone is as good as killed
            self.ray.kill(actor, no_restart=True)

    def _start(self, slot: _Slot) -> None:
        """Give the slot a fresh actor with the problem prepared; actors that die meanwhile are replaced (at
        most max_retries times). A problem error is raised as itself."""
        faults = _faults(self.ray)
        reasons = []
        for _ in range(self.max_retries + 1):
            if self._closed:
                raise ClusterError("the evaluator was closed")
            if not self._connected():
                raise ClusterError("Ray was disconnected")
            actor = self._new_actor()
            slot.starts += 1
            ref = actor.setup.remote(Path(self.source.path).name, self.source.text, self.options, self.problem_path)
            try:
                info = self.ray.get(ref, timeout=self.setup_timeout_s)
            except faults as exc:
                self._kill(actor)
                reasons.append(_short(exc))
                continue
            except self.ray.exceptions.RayTaskError as exc:
                self._kill(actor)
                cause = getattr(exc, "cause", None)
                raise cause if isinstance(cause, KFoundryError) else exc from None
            slot.actor, slot.info = actor, info
            return
        raise ClusterError(f"worker {slot.index} could not start: " + "; ".join(reasons))

    def prepare(self) -> ClusterPrepared:
        """Start the workers (each runs the reference on its own device); the first worker's view."""
        with self._prepare_lock:
            if self.prepared is None:
                self.prepared = self._prepare()
            return self.prepared

    def _prepare(self) -> ClusterPrepared:
        kind = "GPU" if self.gpu else "CPU"
        self.progress(f"ray: starting {self.workers} evaluation worker(s), one per {kind}, each with the reference")
        slots = [_Slot(i) for i in range(self.workers)]
        with ThreadPoolExecutor(len(slots), thread_name_prefix="kfoundry-ray-start") as executor:
            futures = [executor.submit(self._start, slot) for slot in slots]
        errors = [f.exception() for f in futures]
        problem = next((e for e in errors if isinstance(e, KFoundryError) and not isinstance(e, ClusterError)), None)
        ready = [slot for slot, error in zip(slots, errors) if error is None]
        if problem is not None or not ready:
            for slot in ready:
                self._retire(slot)
            raise problem or errors[0]
        for slot, error in zip(slots, errors):
            if error is not None:
                self._lost.append(f"worker {slot.index}: {error}")
                self.progress(f"ray: worker {slot.index} is not used: {error}")
        self._slots = {slot.index: slot for slot in ready}
        self._live = len(ready)
        for slot in ready:
            self._free.put(slot)
        first = ready[0].info
        return ClusterPrepared(
            source=self.source, device_facts=DeviceFacts.from_dict(first["device_facts"]),
            cost=ProblemCost.from_dict(first["cost"]), warnings=list(first["warnings"]), truth_status=first["truth"],
            weak=dict(first["weak"]), baselines=first["baselines"],
            workers=[{k: s.info[k] for k in ("node", "device", "device_facts")} for s in ready],
            reference_rounding=ReferenceRounding.from_dict(first.get("reference_rounding")))

    # -- evaluations -------------------------------------------------------------------------------

    def _acquire(self) -> _Slot | None:
        """A free worker, waiting for one; None when none is left (all dead, none being replaced)."""
        while True:
            try:
                return self._free.get(timeout=WAIT_S)
            except queue.Empty:
                with self._lock:
                    if self._closed or (self._live == 0 and self._pending == 0):
                        return None

    def _lose(self, slot: _Slot, reason: str) -> None:
        """The slot's actor died (or stalled): kill it for sure and start a replacement in the background."""
        self._kill(slot.actor)
        with self._lock:
            self._live -= 1
            if self._closed:
                return
            self._pending += 1
        self.progress(f"ray: {slot.label} lost ({reason}); starting a replacement")
        threading.Thread(target=self._replace, args=(slot,), name=f"kfoundry-ray-replace-{slot.index}",
                         daemon=True).start()

    def _replace(self, slot: _Slot) -> None:
        try:
            self._start(slot)
        except Exception as exc:  # noqa: BLE001 -- a slot that cannot come back leaves the others working
            with self._lock:
                self._pending -= 1
                self._lost.append(f"worker {slot.index}: {exc}")
            self.progress(f"ray: worker {slot.index} could not be replaced: {exc}")
            return
        with self._lock:
            self._pending -= 1
            closed = self._closed
            if not closed:
                self._live += 1
        if closed:
            self._retire(slot)
            return
        self.progress(f"ray: {slot.label} is back")
        self._free.put(slot)

    def evaluate(self, candidate: str | Path) -> Evaluation:
        path = Path(candidate)
        text = read_source(path, CandidateFileError, "candidate")
        self.prepare()
        faults = _faults(self.ray)
        reasons: list[str] = []
        for attempt in range(self.max_retries + 1):
            if not self._connected():
                raise ClusterError("not connected to Ray: the evaluator cannot evaluate after disconnect()")
            slot = self._acquire()
            if slot is None:
                reasons.append("no evaluation worker is left" + (f" ({'; '.join(self._lost)})" if self._lost else ""))
                break
            with self._lock:
                self._busy[slot.index] = str(path)
            try:
                ref = slot.actor.evaluate.remote(path.name, text, str(path.resolve()))
                data = self.ray.get(ref, timeout=self.call_timeout_s)
            except faults as exc:
                reason = f"{slot.label}: {_short(exc)}"
                reasons.append(reason)
                self._lose(slot, reason)
                continue
            except self.ray.exceptions.RayTaskError as exc:
                self._free.put(slot)  # the actor lives; the error is the evaluator's own, raised as locally
                cause = getattr(exc, "cause", None)
                raise cause if isinstance(cause, Exception) else exc from None
            finally:
                with self._lock:
                    self._busy.pop(slot.index, None)
            self._free.put(slot)
            evaluation = Evaluation.from_dict(data)
            evaluation.settings["worker"] = {"index": slot.index, "node": slot.info.get("node"),
                                             "device": slot.info.get("device"), "attempts": attempt + 1}
            if reasons:
                evaluation.warnings.append(f"evaluated on attempt {attempt + 1}: earlier evaluation worker(s) died "
                                           f"while evaluating it ({'; '.join(reasons)})")
            return evaluation
        return self._crash(path, text, reasons)

    def _crash(self, path: Path, text: str, reasons: list[str]) -> Evaluation:
        from kfoundry.diagnose import diagnose

        evaluation = Evaluation(
            status="crash", problem=self.problem_path, candidate=str(path.resolve()), device=self.device,
            message=(f"no verdict: the evaluation worker was lost {len(reasons)} time(s) while evaluating this "
                     f"candidate ({'; '.join(reasons)}). Either the candidate kills the process that runs it, or "
                     "the cluster is losing workers"),
            error={"reasons": reasons},
            cost=self.prepared.cost if self.prepared else None,
            device_facts=self.prepared.device_facts if self.prepared else None,
            reference_rounding=self.prepared.reference_rounding if self.prepared else None,
            settings={"seed": self.options.seed, "worker": {"attempts": len(reasons)}},
        )
        evaluation.timing.reason = "not evaluated: the worker was lost"
        evaluation.diagnosis = diagnose(evaluation, text)
        return evaluation

    def in_flight(self) -> list[dict[str, Any]]:
        """The evaluations now running (monitoring, tests): candidate, actor, node, pid of the actor's process."""
        with self._lock:
            running = [(self._slots[i], c) for i, c in self._busy.items() if i in self._slots]
        return [{"candidate": c, "actor": slot.actor, "index": slot.index, "node": slot.info.get("node"),
                 "pid": slot.info.get("pid")} for slot, c in running]

    # -- the end -----------------------------------------------------------------------------------

    def _retire(self, slot: _Slot) -> None:
        """Let the actor clean up after itself (temporary files, its spare worker), then end it."""
        if not self._connected():
            return
        with suppress(Exception):  # a dead or stuck actor is simply killed
            self.ray.get(slot.actor.close.remote(), timeout=30)
        self._kill(slot.actor)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        retiring = []
        while True:  # busy actors are not waited for: killing them ends their evaluations
            try:
                retiring.append(self._free.get_nowait())
            except queue.Empty:
                break
        for slot in retiring:
            self._retire(slot)
        for slot in self._slots.values():
            if slot not in retiring and slot.actor is not None:
                self._kill(slot.actor)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
