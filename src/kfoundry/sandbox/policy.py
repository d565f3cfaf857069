"""The sandbox a candidate's worker puts itself in when it starts, before it imports torch or starts a
thread (Landlock binds the calling thread and what it starts later), and the record of what held.

- Filesystem (Landlock): read and execute the system, Python, CUDA and compiler paths (the package's
  own source included: the worker imports it; reading it gives nothing away) and every folder of the
  parent's import path and the problem's folder (the user's code comes with the problem: what the
  parent imports, a candidate may import). Landlock only grants, so a folder to be granted that holds
  something private (the cache, the library, run folders, a kfoundry.toml, other evaluations' folders,
  the home's credentials) is granted entry by entry, the private ones left out; its names stay
  listable (Python's import lists a folder of sys.path), nothing in a private entry can be read. Read
  and write the worker's own folder (its copy of the candidate, its Triton, extension and CUDA caches,
  its temp dir) and, on a GPU, /dev/shm (torch and the driver create CUDA IPC files there by name; no
  folder of ours lives there: evaluate.parent.process.work_root, and a worker whose folder does is reported as
  missing a part of its sandbox). Of /proc only the worker's own directory (writable: CUDA's driver
  writes there) and a few system files, read-only; of /dev only the devices it needs, one by one.
  Nothing else: not the baseline cache, the library, run folders, other workers' folders, the rest of
  /tmp, or /proc of any other process (another's environ); nothing written outside its own folder.
- Network: no sockets but AF_UNIX (seccomp), and on Landlock ABI 4+ no TCP bind or connect. Under
  Nsight Compute (`--ncu`) AF_INET stays open: its injected library talks to the host over
  localhost TCP.
- Processes: no ptrace, process_vm_readv/writev or setsid (seccomp), so whatever the worker starts
  stays in its session, all of which the parent kills at the end; on Landlock ABI 6+ no signals to
  processes outside the sandbox.
- Not dumpable, and (see kfoundry.sandbox.environment) an environment built from an allow-list.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import pwd
import sys
import tomllib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kfoundry.paths import inside
from kfoundry.sandbox import landlock, process_flags, seccomp

MODE_ENV = "KFOUNDRY_SANDBOX"  # "on" (the default) or "strict"
INET_ENV = "KFOUNDRY_SANDBOX_INET"  # "1": Nsight Compute's localhost TCP is allowed
WITHOUT_ENV = "KFOUNDRY_SANDBOX_WITHOUT"
MODES = ("on", "strict")
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/sys",
               "/usr/local/cuda", "/usr/local/nvidia")
PROC_READ = ("/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/filesystems", "/proc/sys", "/proc/driver/nvidia",
             "/proc/devices")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
GPU_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*")
SHARED_MEMORY = "/dev/shm"
PRIVATE_ENV = "KFOUNDRY_WORKER_PRIVATE"  # JSON list: the private paths the parent knows (`*`: a pattern)
# the home's credentials (a folder of sys.path may be the home itself, or hold it)
HOME_SECRETS = (".ssh", ".aws", ".gnupg", ".netrc", ".config", ".docker", ".kube", ".git-credentials", ".pypirc",
                ".azure", ".password-store", ".huggingface", ".kaggle", ".npmrc", ".pgpass", ".claude", ".claude.json",
                ".cargo/credentials", ".cargo/credentials.toml", ".m2/settings.xml", ".bash_history", ".zsh_history",
                ".python_history", ".ray")
# left out wherever a folder is granted entry by entry: kfoundry.toml may hold API keys ([keys]), a .env
# file often does, an SQLite file is a library or a run store
PRIVATE_NAMES = ("kfoundry.toml", ".env", "*.sqlite", "*.sqlite-wal", "*.sqlite-shm")
RUN_MARKERS = ("run.sqlite", "bench.json")  # a folder holding one is a run's (-o DIR) or a bench's output
WORK_PREFIX = "kfoundry-"  # evaluate.parent.workdirs.PREFIX: every evaluation folder, the judge's included
SPLIT_LIMIT = 512  # rules for the entries of folders granted entry by entry, in all
SPLIT_DEPTH = 8  # how deep a private path may lie below a granted folder


@dataclass
class SandboxReport:
    """Which restrictions held in a worker: a description of each, or None where the kernel lacks it."""

    filesystem: str | None = None
    network: str | None = None
    processes: str | None = None
    environment: str = "allow-list"
    dumpable: bool | None = None
    missing: list[str] = field(default_factory=list)  # "filesystem: why", ...
    unreadable: list[str] = field(default_factory=list)  # parts of the import path left closed, and why

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def complete(self) -> bool:
        return not self.missing


def _real_home() -> str:
    """The user's home from the password database: a worker's HOME is its own folder."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.path.expanduser("~")


def private_paths(extra: Iterable[str | os.PathLike] = ()) -> list[str]:
    """What this process (the parent) knows to be private, for its workers: the cache (the baseline
    cache's key, the default library), the library wherever it is configured, the default run and bench
    folders and the kfoundry.toml of the working directory, the home's credentials, and `extra` (what
    the caller knows: an evaluator's cache folder). A `*` in a last part makes a pattern."""
    from kfoundry.paths import cache_dir

    cwd = Path.cwd()
    found = [cache_dir(), *extra, cwd / "runs", cwd / (glob.escape("bench-") + "*"), cwd / "kfoundry.toml"]
    found += [glob.escape(str(path)) + "*" for path in _libraries(cwd)]  # with its -wal and -shm files
    for home in dict.fromkeys((str(Path.home()), _real_home())):
        found += [Path(home) / name for name in HOME_SECRETS]
    return sorted({_real_pattern(str(path)) for path in found})


def _libraries(cwd: Path) -> list[Path]:
    """The experience library's file where it is configured (config `library`: KFOUNDRY_LIBRARY, or
    kfoundry.toml here); the default lies in the cache."""
    found = [os.environ.get("KFOUNDRY_LIBRARY", "")]
    try:
        found.append(str(tomllib.loads((cwd / "kfoundry.toml").read_text(encoding="utf-8")).get("library", "")))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        pass
    return [cwd / path for path in found if path and path != "off"]


def _real_pattern(path: str) -> str:
    """`path` resolved (symlinks); of a pattern, its folder (the last part is kept)."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(os.path.realpath(folder), name) if glob.has_magic(name) else os.path.realpath(path)


class Private:
    """Paths no rule may open: `paths` (and whatever lies in them; a `*` in a last part makes a pattern),
    and `others`, patterns of other evaluations' folders, left out where a folder is granted entry by
    entry (a folder of the import path inside one, such as a Ray actor's copy of the problem, is ours)."""

    def __init__(self, paths: Iterable[str], others: Iterable[str] = ()) -> None:
        self.paths = [_real_pattern(p) for p in paths]
        self.others = [_real_pattern(p) for p in others]

    @staticmethod
    def _matches(path: str, pattern: str) -> bool:
        folder, name = os.path.split(pattern)
        base = os.path.basename(path)
        return os.path.dirname(path) == folder and (base == name or fnmatch.fnmatchcase(base, name))

    def covering(self, real: str) -> str | None:
        """The private path that `real` (resolved) is or lies in, if any."""
        for pattern in self.paths:
            for path in _self_and_parents(real):
                if self._matches(path, pattern):
                    return pattern
        return None

    def excluded(self, real: str) -> bool:
        """Left out of a folder granted entry by entry."""
        return self.covering(real) is not None or any(self._matches(real, p) for p in self.others)

    def lies_below(self, folder: str) -> bool:
        """Something private, existing, strictly inside `folder`."""
        for pattern in self.paths + self.others:
            parent, name = os.path.split(pattern)
            if not inside(parent, [folder]):
                continue
            if parent != folder or _exists_matching(parent, name):
                return True
        return False


def _self_and_parents(path: str) -> Iterable[str]:
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def _exists_matching(folder: str, name: str) -> bool:
    if not glob.has_magic(name):
        return os.path.lexists(os.path.join(folder, name))
    try:
        return any(fnmatch.fnmatchcase(entry, name) for entry in os.listdir(folder))
    except OSError:
        return False


def _private_name(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in PRIVATE_NAMES)


def _run_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir() and any(os.path.lexists(os.path.join(entry.path, m)) for m in RUN_MARKERS)
    except OSError:
        return False


def _run_folder_around(real: str) -> str | None:
    """The run's or bench's folder that `real` is or lies in (a run resumed: its problem.py is there)."""
    for path in _self_and_parents(real):
        if any(os.path.isfile(os.path.join(path, marker)) for marker in RUN_MARKERS):
            return path
    return None


def _import_first(entry: os.DirEntry) -> tuple[bool, str]:
    """What an import may need first, should the rules run out: folders, then modules."""
    try:
        wanted = entry.is_dir() or entry.name.endswith((".py", ".so", ".pth", ".zip", ".egg"))
    except OSError:
        wanted = False
    return not wanted, entry.name


class Readable:
    """The read rules for a list of paths: each one whole where nothing private lies in it, otherwise
    (Landlock only grants, it cannot deny below a granted folder) entry by entry, the private entries
    left out and the folder itself listable. `scan`: also look in the folder for what is private by its
    name (kfoundry.toml, SQLite files) or content (a run's folder), as in a user's own folders."""

    def __init__(self, private: Private) -> None:
        self.private = private
        self.read: list[str] = []
        self.listing: list[str] = []
        self.notes: list[str] = []
        self._left = SPLIT_LIMIT

    def add(self, path: str, scan: bool) -> None:
        real = os.path.realpath(path)
        if not os.path.exists(real) or inside(real, self.read):
            return
        covering = self.private.covering(real) or (_run_folder_around(real) if scan else None)
        if covering is not None:
            self.notes.append(f"{path}: not readable by candidates, it lies in the private {covering}")
        elif not self._holds_private(real, scan):
            self.read.append(real)
        else:
            self._split(real, scan, 1)

    def _holds_private(self, real: str, scan: bool) -> bool:
        if not os.path.isdir(real):
            return False
        if self.private.lies_below(real):
            return True
        if not scan:
            return False
        try:
            with os.scandir(real) as entries:
                return any(_private_name(e.name) or _run_folder(e) for e in entries)
        except OSError:
            return False

    def _left_out(self, entry: os.DirEntry, real: str, scan: bool) -> bool:
        return self.private.excluded(real) or (scan and (_private_name(entry.name) or _run_folder(entry)))

    def _split(self, folder: str, scan: bool, depth: int) -> None:
        try:
            with os.scandir(folder) as found:
                entries = sorted(found, key=_import_first)
        except OSError:
            return
        self.listing.append(folder)
        skipped = []
        for entry in entries:
            real = os.path.realpath(entry.path)
            if self._left_out(entry, real, scan):
                continue
            if self._holds_private(real, scan):
                if depth < SPLIT_DEPTH:
                    self._split(real, scan, depth + 1)
                else:
                    skipped.append(entry.name)
            elif self._left > 0:
                self._left -= 1
                self.read.append(real)
            else:
                skipped.append(entry.name)
        if skipped:
            self.notes.append(f"{folder}: {len(skipped)} entries not readable by candidates ({', '.join(skipped[:5])}"
                              f"{', ...' if len(skipped) > 5 else ''}): more than {SPLIT_LIMIT} rules, or a "
                              f"private path more than {SPLIT_DEPTH} folders deep")


def _private_from_environment(workdir: Path) -> Private:
    """The parent's private paths (PRIVATE_ENV), else what this process can tell itself; other
    evaluations' folders are those beside this worker's own."""
    try:
        paths = json.loads(os.environ[PRIVATE_ENV])
    except (KeyError, ValueError):
        paths = private_paths()
    paths = [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else private_paths()
    return Private(paths, others=[str(Path(os.path.realpath(workdir)).parent / (WORK_PREFIX + "*"))])


def worker_rules(workdir: Path, gpu: bool, handle_tcp: bool = True, shared_memory: bool = True, *,
                 import_path: list[str] | None = None, private: Private | None = None) -> landlock.Rules:
    """The paths a candidate's worker may use. Read: the system, Python's prefixes, the kfoundry package,
    every folder of `import_path` (default: sys.path, to which the worker added the parent's entries and
    the problem's folder: kfoundry.sandbox.environment) and of PATH, none of it private (`private`,
    default: the parent's list, PRIVATE_ENV); of PATH nothing under the home or the working directory the
    worker was started from (they are not code a worker runs)."""
    import kfoundry

    private = private or _private_from_environment(workdir)
    readable = Readable(private)
    prefixes = [os.path.realpath(p) for p in dict.fromkeys((sys.prefix, sys.base_prefix, sys.exec_prefix))]
    system = list(SYSTEM_READ) + prefixes + [os.path.dirname(os.path.realpath(sys.executable)),
                                             os.path.dirname(os.path.realpath(kfoundry.__file__))]
    system += [os.environ[env] for env in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(env)]
    for path in system:
        readable.add(path, scan=False)
    own = os.path.realpath(workdir)
    for entry in sys.path if import_path is None else import_path:
        if entry and os.path.isabs(entry) and not inside(entry, [own]):
            readable.add(entry, scan=True)
    homes = [p for p in (_real_home(), os.environ.get("KFOUNDRY_PARENT_CWD", "")) if p and os.path.realpath(p) != "/"]
    outside = [os.path.realpath(p) for p in homes]
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if entry and os.path.isabs(entry) and (not inside(entry, outside) or inside(entry, prefixes)):
            readable.add(entry, scan=False)
    devices = list(DEVICES)
    # /proc/self, resolved: this process's own directory, writable (CUDA's driver writes there: without
    # it cuInit fails with error 304, seen on the H200)
    writes = [str(workdir), f"/proc/{os.getpid()}"]
    if gpu:
        devices += [path for pattern in GPU_DEVICES for path in sorted(glob.glob(pattern))]
        if shared_memory:  # CUDA IPC: torch's reference counters and the driver's event segments
            writes.append(SHARED_MEMORY)
    writes += _shared_files()
    return landlock.Rules(read=list(dict.fromkeys(readable.read + list(PROC_READ))), write=writes, devices=devices,
                          handle_tcp=handle_tcp, listing=readable.listing, notes=readable.notes)


def _shared_files() -> list[str]:
    """The GPU lock's two files and the timeline (KFOUNDRY_GPU_LOCK, KFOUNDRY_GPU_TIMELINE): the worker
    takes the lock (flock) and appends its phases. Made here if missing, since a rule needs a path that
    exists. A candidate could write into them: the lock is only ever flocked, the timeline is a benchmark's
    diagnostic."""
    files = []
    # gpu_lock's ENV_LOCK and ENV_TIMELINE, spelled out: importing kfoundry.evaluate imports torch, which
    # must come after the sandbox
    lock = os.environ.get("KFOUNDRY_GPU_LOCK")
    for path in filter(None, (lock, lock and lock + ".turnstile", os.environ.get("KFOUNDRY_GPU_TIMELINE"))):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
            files.append(path)
        except OSError:
            pass
    return files


def apply(workdir: Path, gpu: bool, allow_inet: bool = False, shared_memory: bool = True) -> SandboxReport:
    """Restrict this process (and what it starts) now; every failure is recorded, none is fatal here
    (the parent decides: a warning, or a refusal under --sandbox strict). KFOUNDRY_SANDBOX_WITHOUT
    (landlock, seccomp; comma-separated) leaves parts out, reported as missing as on a kernel that lacks
    them: how the warnings and --sandbox strict are tested on machines that have everything."""
    without = set(filter(None, os.environ.get(WITHOUT_ENV, "").split(",")))
    report = SandboxReport()
    report.dumpable = not process_flags.make_non_dumpable()
    if report.dumpable:
        report.missing.append("dumpable: prctl(PR_SET_DUMPABLE) failed")
    try:
        if "landlock" in without:
            raise landlock.LandlockUnavailable(f"left out by {WITHOUT_ENV}")
        rules = worker_rules(workdir, gpu, handle_tcp=not allow_inet, shared_memory=shared_memory)
        report.filesystem = landlock.restrict(rules)
        report.unreadable = list(rules.notes)
        if gpu and shared_memory:
            report.filesystem += f"; {SHARED_MEMORY} writable (CUDA IPC)"
    except landlock.LandlockUnavailable as exc:
        report.missing.append(f"filesystem: Landlock is not available ({exc})")
    if gpu and shared_memory and inside(str(workdir), [os.path.realpath(SHARED_MEMORY)]):
        report.missing.append(f"folders: the worker's folder lies under {SHARED_MEMORY}, which CUDA IPC needs "
                              "writable, so every candidate can reach every other's folder: set KFOUNDRY_WORK_DIR "
                              "to a folder outside it")
    try:
        if "seccomp" in without:
            raise seccomp.SeccompUnavailable(f"left out by {WITHOUT_ENV}")
        report.network = seccomp.install(allow_inet=allow_inet)
        report.processes = "own session, all of it killed at the end; setsid, ptrace denied (seccomp)"
    except seccomp.SeccompUnavailable as exc:
        report.missing.append(f"network and processes: seccomp is not available ({exc})")
        report.processes = "own session, killed at the end (a child may leave it: no seccomp)"
    return report
