"""A worker over its host memory budget is ended, with a record of how much it held.

RLIMIT_AS cannot be used beside CUDA (the driver reserves terabytes of address space), and files a
worker writes to tmpfs (/dev/shm) are memory that is nobody's RSS. So a worker gets a memory
cgroup of its own where one can be made (the kernel then charges its anonymous memory and its tmpfs
pages and OOM-kills it at the limit), else a watchdog thread that samples its process tree's private
memory plus its folder's bytes and SIGKILLs its process group when the sum passes the limit.

The worker enters its cgroup through a shell prefix that writes its own pid to cgroup.procs and
execs the command, so no preexec_fn is needed (preexec_fn is unsafe in a threaded parent).
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import threading
import time
from pathlib import Path

from kfoundry.evaluate.parent.host_memory import exited, folder_bytes, process_memory, process_tree

FORCE_ENV = "KFOUNDRY_MEMORY_GUARD"  # "watchdog": never use a cgroup (tests use it)
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_V1_MEMORY = CGROUP_ROOT / "memory"
WATCHDOG_INTERVAL_S = 0.1
_counter = itertools.count()
_counter_lock = threading.Lock()


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def _write(path: Path, value: str) -> str | None:
    """Write a control file; returns the error text, or None when it took."""
    try:
        with open(path, "w") as file:
            file.write(value)
        return None
    except OSError as error:
        return f"{path}: {error.strerror or error}"


def _keyed(text: str | None, key: str) -> int | None:
    """The value of `key N` in a flat-keyed file such as memory.events."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _own_cgroup_paths() -> tuple[str | None, str | None]:
    """(cgroup v2 path, cgroup v1 memory path) of this process, from /proc/self/cgroup."""
    v2 = v1 = None
    for line in (_read(Path("/proc/self/cgroup")) or "").splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and controllers == "":
            v2 = path
        elif "memory" in controllers.split(","):
            v1 = path
    return v2, v1


def _under(base: Path, path: str | None) -> Path | None:
    if path is None:
        return None
    return base / path.strip("/") if path.strip("/") else base


def _candidate_parents() -> list[tuple[str, Path]]:
    """Where a worker's cgroup may go, best first: under our own cgroup, then at the top."""
    v2, v1 = _own_cgroup_paths()
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        kind, parents = "cgroup v2", [_under(CGROUP_ROOT, v2), CGROUP_ROOT]
    elif (CGROUP_V1_MEMORY / "memory.limit_in_bytes").exists():
        kind, parents = "cgroup v1", [_under(CGROUP_V1_MEMORY, v1), CGROUP_V1_MEMORY]
    else:
        return []
    unique = list(dict.fromkeys(parent for parent in parents if parent is not None))
    return [(kind, parent) for parent in unique]


def _remove_cgroup(folder: Path, wait_s: float = 2.0) -> bool:
    """Kill what is left in a cgroup and rmdir it; rmdir fails while killed processes exit."""
    deadline = time.monotonic() + wait_s
    while True:
        for pid in (_read(folder / "cgroup.procs") or "").split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        try:
            folder.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def _try_cgroup(kind: str, parent: Path, limit: int) -> tuple[Path | None, str]:
    """Make a limited cgroup under parent: (its folder, "") or (None, why not)."""
    with _counter_lock:
        n = next(_counter)
    folder = parent / f"kfoundry-{os.getuid()}-{os.getpid()}-{n}"
    try:
        folder.mkdir()
    except OSError as error:
        return None, f"mkdir {folder}: {error.strerror or error}"
    limit_file = folder / ("memory.max" if kind == "cgroup v2" else "memory.limit_in_bytes")
    why = None
    if not limit_file.exists():
        why = f"{limit_file} missing (memory controller not enabled there)"
    else:
        why = _write(limit_file, str(limit))
        if why is None:
            seen = _read_int(limit_file)
            # the kernel rounds the limit to whole pages
            if seen is None or abs(seen - limit) > 1 << 20:
                why = f"{limit_file} reads back {seen}, not {limit}"
    if why is not None:
        _remove_cgroup(folder)
        return None, why
    # No swap in place of an OOM kill; and on v2, kill the whole worker tree together. Optional.
    if kind == "cgroup v2":
        for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
            if (folder / name).exists():
                _write(folder / name, value)
    elif (folder / "memory.memsw.limit_in_bytes").exists():
        _write(folder / "memory.memsw.limit_in_bytes", str(limit))
    return folder, ""


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


class MemoryGuard:
    """Bounds one worker process (and its children, and its folder's files) to `limit_bytes`."""

    def __init__(self, limit_bytes: int, folder: Path, label: str, kind: str,
                 cgroup: Path | None = None, reason: str = "") -> None:
        self.limit_bytes = limit_bytes
        self.folder = Path(folder)
        self.label = label
        self.kind = kind  # "cgroup v2", "cgroup v1" or "watchdog"
        self.cgroup = cgroup
        self.reason = reason  # why no cgroup is used ("" with one)
        self.pid: int | None = None
        self._seen: int | None = None  # bytes in use when the watchdog ended the worker
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    @classmethod
    def create(cls, limit_bytes: int, folder: Path, label: str) -> MemoryGuard:
        """A cgroup v2 or v1 memory cgroup if one can be made and limited, else the watchdog."""
        if os.environ.get(FORCE_ENV, "").strip().lower() == "watchdog":
            return cls(limit_bytes, folder, label, "watchdog", reason=f"{FORCE_ENV}=watchdog")
        reasons = []
        for kind, parent in _candidate_parents():
            cgroup, why = _try_cgroup(kind, parent, limit_bytes)
            if cgroup is not None:
                return cls(limit_bytes, folder, label, kind, cgroup=cgroup)
            reasons.append(why)
        why = "; ".join(reasons) if reasons else "no cgroup memory controller mounted"
        return cls(limit_bytes, folder, label, "watchdog", reason=f"no writable memory cgroup ({why})")

    def command_prefix(self) -> list[str]:
        """Put before the worker's command: it joins the cgroup, then execs the command."""
        if self.cgroup is None:
            return []
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.cgroup / "cgroup.procs")]

    def attach(self, pid: int) -> None:
        """Call after Popen (with start_new_session=True, so its process group can be killed)."""
        self.pid = pid
        if self.cgroup is None and self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._watch, args=(pid,), daemon=True,
                                            name=f"kfoundry-memory-guard-{self.label}")
            self._thread.start()

    def _watch(self, pid: int) -> None:
        while not self._stop.is_set() and not exited(pid):
            used = sum(process_memory(member) for member in process_tree(pid)) + folder_bytes(self.folder)
            if used > self.limit_bytes:
                self._seen = used
                self._kill(pid)
                return
            self._stop.wait(WATCHDOG_INTERVAL_S)

    @staticmethod
    def _kill(pid: int) -> None:
        tree = process_tree(pid)
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        for member in tree:  # not a group leader, or children that left its group
            try:
                os.kill(member, signal.SIGKILL)
            except OSError:
                pass

    def exceeded(self) -> int | None:
        """Bytes in use when the worker was ended for memory; None if it was not."""
        if self.cgroup is None:
            return self._seen
        if self.kind == "cgroup v2":
            if (_keyed(_read(self.cgroup / "memory.events"), "oom_kill") or 0) > 0:
                return _read_int(self.cgroup / "memory.peak") or self.limit_bytes
            return None
        if (_keyed(_read(self.cgroup / "memory.oom_control"), "oom_kill") or 0) > 0:
            return _read_int(self.cgroup / "memory.max_usage_in_bytes") or self.limit_bytes
        return None

    def close(self) -> None:
        """Stop watching; kill whatever is left in the cgroup and remove it. Safe to call again."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self.cgroup is not None:
            _remove_cgroup(self.cgroup)

    def describe(self) -> str:
        """How the worker is bounded, for the record."""
        if self.kind == "watchdog":
            return f"watchdog (RSS + folder), {_size(self.limit_bytes)}: {self.reason}"
        return f"{self.kind}, {_size(self.limit_bytes)}"

    def __enter__(self) -> MemoryGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryGuard({self.describe()!r}, cgroup={str(self.cgroup) if self.cgroup else None!r})"


_NAME = re.compile(r"kfoundry-(\d+)-(\d+)-\d+")


def reap_cgroups() -> int:
    """Remove empty `kfoundry-<uid>-*` cgroups of ours whose creator (pid in the name) is dead:
    those a killed evaluator left behind. Returns how many were removed; never raises."""
    removed = 0
    uid = os.getuid()
    for _, parent in _candidate_parents():
        try:
            entries = list(os.scandir(parent))
        except OSError:
            continue
        for entry in entries:
            match = _NAME.fullmatch(entry.name)
            if not match or int(match.group(1)) != uid:
                continue
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                os.kill(int(match.group(2)), 0)
                continue  # its creator lives
            except ProcessLookupError:
                pass
            except OSError:
                continue
            procs = _read(Path(entry.path) / "cgroup.procs")
            if procs is None or procs.strip():
                continue  # unreadable, or still holds processes
            try:
                os.rmdir(entry.path)
                removed += 1
            except OSError:
                continue
    return removed
