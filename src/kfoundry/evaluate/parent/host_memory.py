"""What our processes and files hold in host memory, and what the machine can still give.

An evaluator's footprint is its processes' private memory plus the files it writes to its working
folders (on /dev/shm those are memory too, and not part of any process's RSS). These readers go to
/proc and /sys directly so they cost nothing to import and work in any child process; every one
tolerates processes and files vanishing while it reads (they are measured while running).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

_UNLIMITED_V1 = 1 << 62  # cgroup v1 writes "no limit" as a huge page-rounded number


def _status_kib(pid: int, fields: Iterable[str]) -> dict[str, int]:
    wanted = set(fields)
    found: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                name, _, rest = line.partition(":")
                if name in wanted:
                    found[name] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return found


def exited(pid: int) -> bool:
    """True once the process has exited (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    fields = stat[stat.rfind(")") + 2:].split()
    return not fields or fields[0] in ("Z", "X")


def process_memory(pid: int) -> int:
    """Bytes of private memory of one process: RssAnon + RssShmem (0 if it is gone).

    RssFile is left out: file-backed pages (shared libraries, torch's and CUDA's many-hundred-MB
    .so files, mapped read-only files) are page cache, held once per machine however many processes
    map them, and dropped under pressure; counting them per process would count them many times."""
    kib = _status_kib(pid, ("RssAnon", "RssShmem"))
    return (kib.get("RssAnon", 0) + kib.get("RssShmem", 0)) * 1024


def _parents() -> dict[int, int]:
    """pid -> ppid of every process now alive (ones that exit while we read are skipped)."""
    parents: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return parents
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                text = stat.read()
            # the command name, in parentheses, may hold spaces and parentheses: split after it
            fields = text[text.rindex(")") + 2 :].split()
            parents[int(name)] = int(fields[1])
        except (OSError, ValueError, IndexError):
            continue
    return parents


def children_map() -> dict[int, list[int]]:
    """ppid -> the pids of its children, of every process now alive: one pass over /proc."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    return children


def process_tree(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """The pid and all its descendants now alive (the pid itself first, even if gone); `children`, a
    children_map() already taken, saves a pass over /proc when several trees are wanted at once."""
    if children is None:
        children = children_map()
    tree, pending, seen = [], [pid], {pid}
    while pending:
        current = pending.pop()
        tree.append(current)
        for child in children.get(current, ()):
            if child not in seen:
                seen.add(child)
                pending.append(child)
    return tree


def folder_bytes(path: Path) -> int:
    """Bytes the files under a folder occupy (allocated blocks, so sparse files count as stored);
    symlinks are not followed, and files that vanish while we walk count as nothing."""
    total = 0
    pending = [os.fspath(path)]
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(entry.path)
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_int(path: str) -> int | None:
    """An integer file's value; None if missing, unreadable or "max" (no limit)."""
    try:
        with open(path) as file:
            text = file.read().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _own_cgroups() -> tuple[str | None, str | None]:
    """Our cgroup v2 path and our cgroup v1 memory controller path, from /proc/self/cgroup."""
    v2 = v1 = None
    try:
        with open("/proc/self/cgroup") as cgroups:
            for line in cgroups:
                number, _, rest = line.rstrip("\n").partition(":")
                controllers, _, path = rest.partition(":")
                if number == "0" and controllers == "":
                    v2 = path
                elif "memory" in controllers.split(","):
                    v1 = path
    except OSError:
        pass
    return v2, v1


def _cgroup_v2_room(path: str) -> tuple[int, str] | None:
    """limit - usage of the tightest memory.max from our cgroup up to the root."""
    best: tuple[int, str] | None = None
    folder = "/sys/fs/cgroup" + ("" if path == "/" else path.rstrip("/"))
    while folder.startswith("/sys/fs/cgroup"):
        limit = _read_int(f"{folder}/memory.max")
        usage = _read_int(f"{folder}/memory.current")
        if limit is not None and usage is not None:
            room = max(limit - usage, 0)
            if best is None or room < best[0]:
                best = (room, f"cgroup v2 limit - usage ({folder})")
        if folder == "/sys/fs/cgroup":
            break
        folder = os.path.dirname(folder)
    return best


def _cgroup_v1_room(path: str) -> tuple[int, str] | None:
    folder = "/sys/fs/cgroup/memory" + ("" if path == "/" else path.rstrip("/"))
    limit = _read_int(f"{folder}/memory.limit_in_bytes")
    usage = _read_int(f"{folder}/memory.usage_in_bytes")
    if limit is None or usage is None or limit >= _UNLIMITED_V1:
        return None
    return max(limit - usage, 0), f"cgroup v1 limit - usage ({folder})"


def host_available() -> tuple[int, str]:
    """The bytes this machine can still give us, and which source gave the figure: the least of
    MemAvailable and, where our memory cgroup (v2 or v1) has a limit, limit minus usage."""
    figures: list[tuple[int, str]] = []
    available = _meminfo_available()
    if available is not None:
        figures.append((available, "MemAvailable"))
    v2, v1 = _own_cgroups()
    if v2 is not None and os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        room = _cgroup_v2_room(v2)
        if room is not None:
            figures.append(room)
    if v1 is not None:
        room = _cgroup_v1_room(v1)
        if room is not None:
            figures.append(room)
    if not figures:
        return 0, "unknown (no /proc/meminfo)"
    return min(figures, key=lambda figure: figure[0])


def _describe_process(pid: int) -> str:
    """'pid (parent ppid, in folder): command line' (its first 100 characters), for a breakdown of a peak."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        folder = os.path.basename(os.readlink(f"/proc/{pid}/cwd"))  # a worker's folder names its kind
    except (OSError, IndexError):
        command, parent, folder = "?", "?", "?"
    return f"{pid} (parent {parent}, in {folder}): {command[:100]}"


class MemorySampler:
    """Samples, every `interval_s` on a daemon thread, the private memory of the process trees and
    the bytes of the folders it watches, and keeps the peak of their sum: an evaluator's whole
    footprint, for tests and benchmarks."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self.peak_parts: dict[str, int] = {}  # at the peak: bytes per process (and of the files)
        self.samples = 0
        self._pids: list[int] = []
        self._parents: list[int] = []  # processes whose descendants count, not themselves
        self._folders: list[Path] = []
        self._prefixes: list[tuple[Path, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch_pid(self, pid: int) -> None:
        """Count this process and all its descendants (found afresh at every sample)."""
        with self._lock:
            self._pids.append(pid)

    def watch_children(self, pid: int) -> None:
        """Count every descendant of this process (not the process itself): what an evaluator in
        this process started."""
        with self._lock:
            self._parents.append(pid)

    def watch_folder(self, path: Path) -> None:
        """Count the files under this folder."""
        with self._lock:
            self._folders.append(Path(path))

    def watch_prefix(self, root: Path | str, prefix: str) -> None:
        """Count every folder under `root` whose name starts with `prefix`, including ones made
        after this call (an evaluator's workers make their folders as they start)."""
        with self._lock:
            self._prefixes.append((Path(root), prefix))

    def sample(self) -> int:
        """Take one sample now; returns its bytes (and updates the peak)."""
        # one pass over /proc for all the trees: a pass per process, every 50 ms, took half a core (and the
        # GIL) from the evaluator it measures (seen with py-spy on the H200)
        children = children_map()
        with self._lock:
            pids, folders, prefixes = list(self._pids), list(self._folders), list(self._prefixes)
            pids += [child for parent in self._parents for child in process_tree(parent, children)[1:]]
        for root, prefix in prefixes:
            try:
                with os.scandir(root) as entries:
                    folders += [
                        Path(e.path)
                        for e in entries
                        if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)
                    ]
            except OSError:
                continue
        counted: dict[int, int] = {}
        for pid in pids:
            for member in process_tree(pid, children):
                if member not in counted:
                    counted[member] = process_memory(member)
        files = sum(folder_bytes(folder) for folder in dict.fromkeys(folders))
        total = sum(counted.values()) + files
        if total > self.peak:
            self.peak = total
            self.peak_parts = {"files": files, **{_describe_process(pid): size for pid, size in counted.items()}}
        self.samples += 1
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def start(self) -> MemorySampler:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="kfoundry-memory-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (after one last sample, so a short run is not missed)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sample()

    def __enter__(self) -> MemorySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
