"""Worker processes: one fresh process per job, started ahead of need, in a private folder, with an
environment from an allow-list, a sandbox (where it runs a candidate's code), a timeout, a memory
budget and (on a GPU) the device's GPU lock. On the CPU a worker is forked from a server that imported
torch already (kfoundry.evaluate.parent.forkserver); elsewhere it is a process of its own.

Protocol: the worker imports torch, reports `ready` and waits for one JSON job on stdin. It writes
JSON lines to a pipe of its own ({"phase": ...} as it goes, {"request": ..., "id": n} when it needs
the judge, then {"result": ...}); the parent answers requests on stdin ({"reply": n, ...}). The
parent keeps every line it read, so the last phase survives a kill, and a wrapper such as
compute-sanitizer may print freely (stdout and stderr go to a log file).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kfoundry
from kfoundry.evaluate.parent import forkserver
from kfoundry.evaluate.parent.memory_guard import MemoryGuard
from kfoundry.evaluate.parent.workdirs import WORK_DIR_ENV, WorkDir
from kfoundry.evaluate.shared.protocol import CHANNEL_FD_ENV, STDERR
from kfoundry.evaluate.timing import gpu_lock
from kfoundry.problem import problem_folders
from kfoundry.sandbox.environment import IMPORT_PATH_ENV, SYS_PATH_ENV, evaluation_environment, missing_entries
from kfoundry.sandbox.policy import PRIVATE_ENV, SHARED_MEMORY, private_paths

MAX_LINE = 1 << 20  # a longer line from a worker is dropped, not parsed
SELF_DEADLINE_GRACE_S = 30.0  # a worker ends itself this long after its job's timeout
READY_TIMEOUT_S = 300.0  # a worker's start-up (imports, CUDA context) before its job's own time counts
_ENDED = object()  # the worker's pipe closed
log = logging.getLogger("kfoundry.sandbox")
_said: set[str] = set()  # the sandbox's notes already logged by this process


class WorkerEnded(Exception):
    """The worker's pipe closed: it exited (or was killed), and says nothing more."""


def session_members(session: int) -> list[int]:
    """The processes of a session, from /proc (stat's sixth field)."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == session:
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 4 and int(fields[3]) == session:
            members.append(int(entry.name))
    return members


def work_root() -> str | None:
    """The folder that workers' and the judge's files go under: KFOUNDRY_WORK_DIR if set, else the
    system's temporary directory (None). Never /dev/shm by default, GPUs included: a CUDA worker's sandbox
    must leave /dev/shm writable (torch's and the driver's CUDA IPC files are made there by name), so any
    folder there would be open to every candidate. A GPU's outputs cross by CUDA IPC: the folders hold
    small files."""
    chosen = os.environ.get(WORK_DIR_ENV)
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return chosen
    return None


def _package_root() -> str:
    return str(Path(kfoundry.__file__).resolve().parent.parent)


def _seconds_between(first: Any, last: Any) -> float | None:
    if not isinstance(first, (int, float)) or not isinstance(last, (int, float)):
        return None
    return round(max(0.0, last - first), 3)


@dataclass
class WorkerOutcome:
    result: dict[str, Any] | None
    phase: str
    returncode: int | None
    timed_out: bool
    stderr_tail: str
    elapsed_s: float
    phase_times: dict[str, float] = field(default_factory=dict)
    wait_s: float | None = None  # from the job's sending until the worker began it (a spare still setting up)
    exit_s: float | None = None  # from the worker's result until its process ended
    out_of_memory_bytes: int | None = None  # ended by its memory guard, with this much in use
    memory_guard: str = ""  # how its memory was bounded

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


Requests = Callable[[dict[str, Any]], dict[str, Any]]
Phases = Callable[[str], None]


def _own_environment(workdir: Path, device: str, label: str, sandbox: str, channel: int) -> dict[str, str]:
    """A worker's own variables: a fork server never starts with these, each child is given them."""
    return {
        "HOME": str(workdir),  # whatever writes under ~ (caches) writes in the worker's folder
        "XDG_CACHE_HOME": str(workdir / "cache"),
        "CUDA_CACHE_PATH": str(workdir / "cuda-cache"),
        "TRITON_CACHE_DIR": str(workdir / "triton-cache"),
        "TORCH_EXTENSIONS_DIR": str(workdir / "torch-extensions"),
        "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor-cache"),
        "TMPDIR": str(workdir / "tmp"),
        "KFOUNDRY_WORKER_DEVICE": device,
        "KFOUNDRY_WORKER_LABEL": label,
        "KFOUNDRY_PARENT_CWD": os.getcwd(),  # the sandbox grants nothing under it
        "KFOUNDRY_SANDBOX": sandbox,
        CHANNEL_FD_ENV: str(channel),
    }


PRIVATE = frozenset(_own_environment(Path("/"), "cpu", "", "on", 0))  # their names


def problem_environment(problem: Path, private: list[Path] | None = None) -> dict[str, str]:
    """The variables that give a worker (judge, baseline process, candidate) the problem's folder first on
    its sys.path (kfoundry.sandbox.environment), and its sandbox the private paths the caller knows beside
    this process's own (kfoundry.sandbox.policy.private_paths): an evaluator's cache folder."""
    return {IMPORT_PATH_ENV: json.dumps([str(Path(problem).resolve().parent)]),
            PRIVATE_ENV: json.dumps(private_paths(private or []))}


def _device_environment(device: str) -> dict[str, str]:
    """A worker's environment before its own variables and the caller's extra ones."""
    env = evaluation_environment()  # an allow-list: no key reaches an evaluation process
    env.update({"PYTHONPATH": os.pathsep.join(filter(None, [_package_root(), env.get("PYTHONPATH")])),
                "PYTHONUNBUFFERED": "1"})
    # what this process imports from, a worker imports from (problems' folders: each its own workers')
    env[SYS_PATH_ENV] = json.dumps(missing_entries(env, leave_out=problem_folders()))
    env.pop(gpu_lock.ENV_LOCK, None)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)  # a GPU worker must compile, not interpret
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // 4)))
        env[gpu_lock.ENV_LOCK] = gpu_lock.lock_path(device)
    return env


def _shared(env: dict[str, str]) -> dict[str, str]:
    """What a fork server starts with: what is read at import (the allow-list, PYTHONPATH, TRITON_INTERPRET,
    the parent's import path), not a worker's own variables, nor our settings (KFOUNDRY_*), which are read
    when the job runs."""
    return {k: v for k, v in env.items()
            if k not in PRIVATE and (not k.startswith("KFOUNDRY_") or k == SYS_PATH_ENV)}


def start_servers(device: str, extra_envs: dict[str, dict[str, str] | None]) -> None:
    """Start, all at once, the fork servers that workers with these labels (and extra variables) will be
    forked from, so that they import side by side while the caller goes on."""
    for label, extra in extra_envs.items():
        forkserver.server_for(device, label, _shared({**_device_environment(device), **(extra or {})}))


class Worker:
    """One worker process, used for exactly one job."""

    def __init__(
        self,
        device: str,
        *,
        wrapper: list[str] | None = None,
        memory_limit_bytes: int | None = None,
        extra_env: dict[str, str] | None = None,
        label: str = "worker",
        sandbox: str = "on",
    ) -> None:
        self.device = device
        self.label = label
        self._dir = WorkDir.create(label, work_root())
        self.workdir = self._dir.path
        self.guard = MemoryGuard.create(memory_limit_bytes, self.workdir, label) if memory_limit_bytes else None
        read_end, write_end = os.pipe()
        env = _device_environment(device)
        env.update(_own_environment(self.workdir, device, label, sandbox, write_end))
        if any("ncu" in os.path.basename(part) for part in wrapper or []):
            env["KFOUNDRY_SANDBOX_INET"] = "1"  # Nsight Compute's injected library reports over localhost TCP
        (self.workdir / "tmp").mkdir()
        env.update(extra_env or {})
        env.setdefault(PRIVATE_ENV, json.dumps(private_paths()))
        self._stderr = open(self.workdir / STDERR, "wb")
        self.started = time.monotonic()
        try:
            self.process = self._fork(env, write_end) if not wrapper else None
            if self.process is None:
                prefix = self.guard.command_prefix() if self.guard else []
                command = [*prefix, *(wrapper or []), sys.executable, "-m", "kfoundry.sandbox.start"]
                self.process = subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=self._stderr, stderr=self._stderr, cwd=self.workdir,
                    env=env, start_new_session=True, pass_fds=(write_end, self._dir.lock_fd),
                )
        finally:
            os.close(write_end)
        if self.guard:
            self.guard.attach(self.process.pid)
        self.messages: list[dict[str, Any]] = []
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, args=(read_end,), daemon=True,
                                        name=f"kfoundry-{label}-reader")
        self._reader.start()
        self._closed = False

    def _fork(self, env: dict[str, str], channel: int) -> forkserver.ForkedProcess | None:
        """The worker forked from a server that imported torch already, or None where there is none."""
        server = forkserver.server_for(self.device, self.label, _shared(env))
        if server is None:
            return None
        cgroup = self.guard.cgroup if self.guard else None
        try:
            return server.spawn(env=env, cwd=str(self.workdir), log=self._stderr.fileno(), channel=channel,
                                keep=self._dir.lock_fd, cgroup_procs=str(cgroup / "cgroup.procs") if cgroup else None)
        except forkserver.ForkServerError:
            return None

    # -- the pipe ------------------------------------------------------------------------------

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for line in pipe:
                if len(line) > MAX_LINE:
                    continue
                try:
                    message = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue
                if isinstance(message, dict):
                    message["_received"] = time.time()
                    if message.get("phase") == "ready":
                        _note_unreadable(message.get("sandbox"))
                    self._inbox.put(message)
        self._inbox.put(_ENDED)

    def send(self, message: dict[str, Any]) -> bool:
        try:
            self.process.stdin.write((json.dumps(message) + "\n").encode())
            self.process.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False  # the worker died: reported from its exit code

    def receive(self, timeout_s: float, keep: bool = True) -> dict[str, Any] | None:
        """The worker's next message (also kept in `messages`, unless not `keep`), or None when none came
        within timeout_s; WorkerEnded once its pipe has closed."""
        try:
            message = self._inbox.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if message is _ENDED:
            self._inbox.put(_ENDED)  # for the next caller too
            raise WorkerEnded
        if keep:
            self.messages.append(message)
        return message

    def wait_ready(self, timeout_s: float) -> bool:
        """Block until the worker said `ready` (True) or died or the time ran out (False)."""
        deadline = time.monotonic() + timeout_s
        while not any(m.get("phase") == "ready" for m in self.messages):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                message = self.receive(min(left, 0.5))
            except WorkerEnded:
                return False
            if message is None and self.process.poll() is not None:
                return False
        return True

    def copy_in(self, candidate: Path) -> Path:
        """The candidate's file, copied into this worker's folder: a sandboxed worker reads nothing outside it."""
        copy = self.workdir / candidate.name
        copy.write_bytes(candidate.read_bytes())
        return copy

    @property
    def sandbox(self) -> dict[str, Any]:
        """What the worker's sandbox put in force (kfoundry.sandbox.policy), from its `ready`; {} before."""
        for message in self.messages:
            if message.get("phase") == "ready":
                return dict(message.get("sandbox") or {})
        return {}

    def run(self, job: dict[str, Any], timeout_s: float, on_request: Requests | None = None,
            on_phase: Phases | None = None, ready_timeout_s: float = READY_TIMEOUT_S) -> WorkerOutcome:
        """Send the job, answer its requests, wait up to timeout_s for its result and its exit. The time
        counts from the worker's `ready` (a spare still importing torch is not the job's fault)."""
        self.wait_ready(ready_timeout_s)
        start, sent = time.monotonic(), time.time()
        deadline = start + timeout_s
        # the worker's own backstop (kfoundry.sandbox.lifeline): this process kills it at the deadline, unless
        # it is dead itself
        self.send({**job, "deadline_s": timeout_s + SELF_DEADLINE_GRACE_S})
        result_seen, timed_out, ended = False, False, False
        for message in list(self.messages):
            if "phase" in message and on_phase:
                on_phase(message["phase"])
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            try:
                message = self.receive(min(left, 0.5))
            except WorkerEnded:
                ended = True
                break
            if message is None:
                if result_seen or self.process.poll() is not None:
                    # the result is in, or the process ended while something it started keeps the pipe open
                    ended = self.process.poll() is not None
                    break
                continue
            if "phase" in message and on_phase:
                on_phase(message["phase"])
            if "request" in message:
                reply = on_request(message) if on_request else {"error": "no requests are served"}
                self.send({"reply": message.get("id"), **reply})
            if "result" in message:
                result_seen = True
        if timed_out:
            self.kill()
        else:
            try:
                self.process.wait(timeout=2.0 if result_seen or ended else max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = not result_seen
                self.kill()
        return self._outcome(start, sent, timed_out)

    def _outcome(self, start: float, sent: float, timed_out: bool) -> WorkerOutcome:
        elapsed, ended = time.monotonic() - start, time.time()
        phase, result, phase_times, walls = "start", None, {}, {}
        for message in self.messages:
            if "phase" in message:
                if message["phase"] == "ready" and "start" in phase_times:
                    continue
                phase = message["phase"]
                phase_times[phase] = message.get("t", 0.0)
                walls[phase] = message.get("wall")
            if "result" in message:
                result = message["result"] if isinstance(message["result"], dict) else None
                phase_times["end"] = message.get("t", 0.0)
                walls["end"] = message.get("wall")
        if phase == "ready":
            phase = "start"
        self._stderr.flush()
        oom = self.guard.exceeded() if self.guard else None
        return WorkerOutcome(
            result=result, phase=phase, returncode=self.process.returncode, timed_out=timed_out,
            stderr_tail=self.stderr_tail(), elapsed_s=elapsed, phase_times=phase_times,
            wait_s=_seconds_between(sent, walls.get("start")), exit_s=_seconds_between(walls.get("end"), ended),
            out_of_memory_bytes=oom, memory_guard=self.guard.describe() if self.guard else "",
        )

    def stderr_tail(self, limit: int = 4000) -> str:
        try:
            with open(self.workdir / STDERR, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                data = f.read()
        except OSError:
            return ""
        return data.decode(errors="replace").strip()

    def kill(self) -> None:
        """Kill the worker's whole session (it leads one: start_new_session), also what it left running
        after it exited, in whatever process group (ninja makes its own); its sandbox denies setsid."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if self.process.poll() is None:
                self.process.kill()
        for pid in session_members(self.process.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.process.wait()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.kill()
        try:
            self.process.stdin.close()
        except OSError:
            pass
        self._stderr.close()
        if self.guard:
            self.guard.close()
        self._dir.remove()
        if self.device != "cpu":
            _remove_ipc_leftovers(self.process.pid)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _note_unreadable(sandbox: Any) -> None:
    """What a worker's sandbox could not open of the import path, logged once per process: a candidate that
    imports it will fail."""
    notes = sandbox.get("unreadable") if isinstance(sandbox, dict) else None
    for note in notes if isinstance(notes, list) else []:
        if isinstance(note, str) and note not in _said:
            _said.add(note)
            log.warning("sandbox: %s", note)


def _remove_ipc_leftovers(pid: int) -> None:
    """What CUDA IPC leaves in /dev/shm for a process that was killed or skipped its teardown: torch's
    reference-count files (torch_<pid>_*) and the driver's event segments (cuda.shm.<dev>.<pid hex>.*)."""
    for pattern in (f"torch_{pid}_*", f"cuda.shm.*.{pid:x}.*"):
        for path in Path(SHARED_MEMORY).glob(pattern):
            try:
                if path.stat().st_uid == os.getuid():
                    path.unlink()
            except OSError:
                pass


class WorkerPool:
    """Hands out fresh workers, keeping `spares` started in advance (imports done, CUDA context made)."""

    def __init__(self, device: str, spares: int = 1, refill: bool = True, **worker_options: Any) -> None:
        self.device = device
        self.spares = spares
        self.refill = refill  # False: only the first spares are started ahead (a single evaluation)
        self.options = worker_options
        self._ready: list[Worker] = []
        self._lock = threading.Lock()
        self._closed = False

    def _start(self) -> Worker:
        return Worker(self.device, label="candidate", **self.options)

    def fill(self) -> None:
        """Start spares until there are `spares` of them."""
        with self._lock:
            while not self._closed and len(self._ready) < self.spares:
                self._ready.append(self._start())

    def resize(self, spares: int) -> None:
        """Keep `spares` started ahead from now on; those beyond it are closed now."""
        with self._lock:
            self.spares = spares
            extra, self._ready = self._ready[spares:], self._ready[:spares]
        for worker in extra:
            worker.close()

    def take(self) -> Worker:
        with self._lock:
            worker = self._ready.pop(0) if self._ready else None
        if worker is None:
            worker = self._start()
        if self.refill:
            self.fill()
        return worker

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._ready = self._ready, []
        for worker in workers:
            worker.close()
