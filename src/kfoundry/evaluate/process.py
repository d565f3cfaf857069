"""Worker processes: one fresh process per job, started ahead of need, in a private directory,
with a scrubbed environment, a timeout and (on CPU) a memory cap.

Protocol: the worker imports torch, reports `ready` and waits for one JSON job on stdin. It
appends JSON lines to `messages.jsonl` in its directory ({"phase": ...} as it goes, then
{"result": ...}); a file, not a pipe, so a wrapper such as compute-sanitizer may print freely and
the last phase survives a kill.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kfoundry

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
MESSAGES = "messages.jsonl"
STDERR = "stderr.log"


def scrubbed_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment minus every variable whose name suggests a secret."""
    env = dict(os.environ if base is None else base)
    return {k: v for k, v in env.items() if not any(marker in k.upper() for marker in SECRET_MARKERS)}


SHARED_MEMORY = Path("/dev/shm")
SHARED_MEMORY_MIN_FREE = 32 << 30


DEVICE_LOCK_ENV = "KFOUNDRY_DEVICE_LOCK"  # see kfoundry.evaluate.timing.device_setup_lock


def device_lock_path(device: str) -> str:
    """One file per device name, shared by every worker on it (of this user, in this temp directory)."""
    name = "".join(c if c.isalnum() else "-" for c in device)
    return os.path.join(tempfile.gettempdir(), f"kfoundry-{os.getuid()}-{name}.lock")


def work_root(device: str) -> str | None:
    """The directory that workers' and the reference's files go under: KFOUNDRY_WORK_DIR if set;
    for a GPU, /dev/shm (memory) where it has 32 GiB free, since an evaluation writes and reads some
    GB there (every trial's outputs and inputs) and the timing phase first waits for dirty file
    pages to reach the disk; else the system's temporary directory (None)."""
    chosen = os.environ.get("KFOUNDRY_WORK_DIR")
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return chosen
    if device == "cpu":
        return None
    try:
        stats = os.statvfs(SHARED_MEMORY)
    except OSError:
        return None
    if os.access(SHARED_MEMORY, os.W_OK) and stats.f_bavail * stats.f_frsize >= SHARED_MEMORY_MIN_FREE:
        return str(SHARED_MEMORY)
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

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


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
    ) -> None:
        self.device = device
        self.workdir = Path(tempfile.mkdtemp(prefix=f"kfoundry-{label}-", dir=work_root(device)))
        env = scrubbed_environment()
        env.update(
            {
                "PYTHONPATH": os.pathsep.join(filter(None, [_package_root(), env.get("PYTHONPATH")])),
                "PYTHONUNBUFFERED": "1",
                "TRITON_CACHE_DIR": str(self.workdir / "triton-cache"),
                "TORCH_EXTENSIONS_DIR": str(self.workdir / "torch-extensions"),
                "TORCHINDUCTOR_CACHE_DIR": str(self.workdir / "inductor-cache"),
                "TMPDIR": str(self.workdir / "tmp"),
                "KFOUNDRY_WORKER_DEVICE": device,
                "KFOUNDRY_WORKER_LABEL": label,
                DEVICE_LOCK_ENV: device_lock_path(device),
            }
        )
        (self.workdir / "tmp").mkdir()
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)  # a GPU worker must compile, not interpret
            env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) // 2)))
        env.update(extra_env or {})
        self._stderr = open(self.workdir / STDERR, "wb")
        limit = memory_limit_bytes if device == "cpu" else None
        command = [*(wrapper or []), sys.executable, "-m", "kfoundry.evaluate.worker"]
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=self._stderr,
            stderr=self._stderr,
            cwd=self.workdir,
            env=env,
            start_new_session=True,
            preexec_fn=(lambda: _limit_memory(limit)) if limit else None,
        )

    def messages(self) -> list[dict[str, Any]]:
        path = self.workdir / MESSAGES
        if not path.exists():
            return []
        out = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
        return out

    def run(self, job: dict[str, Any], timeout_s: float) -> WorkerOutcome:
        """Send the job, wait up to timeout_s for the process to finish, read what it said."""
        start, sent = time.monotonic(), time.time()
        try:
            self.process.stdin.write((json.dumps(job) + "\n").encode())
            self.process.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # the worker died before its job: reported below from its exit code
        timed_out = False
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            self.kill()
        elapsed, ended = time.monotonic() - start, time.time()
        messages = self.messages()
        phase, result, phase_times, walls = "start", None, {}, {}
        for message in messages:
            if "phase" in message:
                phase = message["phase"]
                phase_times[phase] = message.get("t", 0.0)
                walls[phase] = message.get("wall")
            if "result" in message:
                result = message["result"]
                phase_times["end"] = message.get("t", 0.0)
                walls["end"] = message.get("wall")
        self._stderr.flush()
        return WorkerOutcome(
            result=result,
            phase=phase,
            returncode=self.process.returncode,
            timed_out=timed_out,
            stderr_tail=self.stderr_tail(),
            elapsed_s=elapsed,
            phase_times=phase_times,
            wait_s=_seconds_between(sent, walls.get("start")),
            exit_s=_seconds_between(walls.get("end"), ended),
        )

    def stderr_tail(self, limit: int = 4000) -> str:
        try:
            data = (self.workdir / STDERR).read_bytes()
        except OSError:
            return ""
        return data[-limit:].decode(errors="replace").strip()

    def kill(self) -> None:
        """Kill the worker's whole process group, also what it left running after it exited."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if self.process.poll() is None:
                self.process.kill()
        self.process.wait()

    def close(self) -> None:
        self.kill()
        self._stderr.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _limit_memory(limit: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def default_memory_limit() -> int:
    """Per-worker address-space cap on CPU: half the machine, at most 8 GiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 << 30
    return max(2 << 30, min(8 << 30, total // 2))


class WorkerPool:
    """Hands out fresh workers, keeping one spare started in advance to hide start-up."""

    def __init__(self, device: str, **worker_options: Any) -> None:
        self.device = device
        self.options = worker_options
        self._spare: Worker | None = None

    def prestart(self) -> None:
        if self._spare is None:
            self._spare = Worker(self.device, label="candidate", **self.options)

    def take(self, keep_spare: bool = True) -> Worker:
        worker = self._spare or Worker(self.device, label="candidate", **self.options)
        self._spare = None
        if keep_spare:
            self.prestart()
        return worker

    def close(self) -> None:
        if self._spare is not None:
            self._spare.close()
            self._spare = None
