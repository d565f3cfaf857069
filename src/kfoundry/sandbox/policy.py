"""The sandbox a candidate's worker puts itself in when it starts, before it imports torch or starts a
thread (Landlock binds the calling thread and what it starts later), and the record of what held.

- Filesystem (Landlock): read and execute the system, Python, CUDA and compiler paths (the package's
  own source included: the worker imports it; reading it gives nothing away); read and write the
  worker's own folder (its copy of the candidate, its Triton, extension and CUDA caches, its temp
  dir) and, on a GPU, /dev/shm (torch and the driver create CUDA IPC files there by name; no folder of
  ours lives there: evaluate.process.work_root, and a worker whose folder does is reported as missing
  a part of its sandbox). Of /proc only the worker's own directory (writable: CUDA's driver writes
  there) and a few system files, read-only; of /dev only the devices it needs, one by one. Nothing else: not the baseline cache, the library, run folders,
  other workers' folders, the rest of /tmp, or /proc of any other process (another's environ).
- Network: no sockets but AF_UNIX (seccomp), and on Landlock ABI 4+ no TCP bind or connect. Under
  Nsight Compute (`--ncu`) AF_INET stays open: its injected library talks to the host over
  localhost TCP.
- Processes: no ptrace, process_vm_readv/writev or setsid (seccomp), so whatever the worker starts
  stays in its session, all of which the parent kills at the end; on Landlock ABI 6+ no signals to
  processes outside the sandbox.
- Not dumpable, and (see kfoundry.sandbox.environment) an environment built from an allow-list.
"""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

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


@dataclass
class SandboxReport:
    """Which restrictions held in a worker: a description of each, or None where the kernel lacks it."""

    filesystem: str | None = None
    network: str | None = None
    processes: str | None = None
    environment: str = "allow-list"
    dumpable: bool | None = None
    missing: list[str] = field(default_factory=list)  # "filesystem: why", ...

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def complete(self) -> bool:
        return not self.missing


def _inside(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def worker_rules(workdir: Path, gpu: bool, handle_tcp: bool = True, shared_memory: bool = True) -> landlock.Rules:
    """The paths a candidate's worker may use. Of sys.path only what is under Python's prefixes and the
    kfoundry package itself (an entry such as a project folder would open its run folders and its
    kfoundry.toml); of PATH nothing under the home or the working directory the worker was started from."""
    import kfoundry

    prefixes = [os.path.realpath(p) for p in dict.fromkeys((sys.prefix, sys.base_prefix, sys.exec_prefix))]
    reads = list(SYSTEM_READ) + prefixes + [os.path.dirname(os.path.realpath(sys.executable)),
                                            os.path.dirname(os.path.realpath(kfoundry.__file__))]
    reads += [os.environ[env] for env in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(env)]
    reads += [entry for entry in sys.path if entry and _inside(entry, prefixes)]
    private = [os.path.realpath(p) for p in (os.path.expanduser("~"), os.environ.get("KFOUNDRY_PARENT_CWD", ""))
               if p and os.path.realpath(p) != "/"]
    reads += [entry for entry in os.environ.get("PATH", "").split(os.pathsep)
              if entry and os.path.isabs(entry) and (not _inside(entry, private) or _inside(entry, prefixes))]
    reads += list(PROC_READ)
    devices = list(DEVICES)
    # /proc/self, resolved: this process's own directory, writable (CUDA's driver writes there: without
    # it cuInit fails with error 304, seen on the H200)
    writes = [str(workdir), f"/proc/{os.getpid()}"]
    if gpu:
        devices += [path for pattern in GPU_DEVICES for path in sorted(glob.glob(pattern))]
        if shared_memory:  # CUDA IPC: torch's reference counters and the driver's event segments
            writes.append(SHARED_MEMORY)
    writes += _shared_files()
    return landlock.Rules(read=list(dict.fromkeys(reads)), write=writes, devices=devices, handle_tcp=handle_tcp)


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
        report.filesystem = landlock.restrict(worker_rules(workdir, gpu, handle_tcp=not allow_inet,
                                                           shared_memory=shared_memory))
        if gpu and shared_memory:
            report.filesystem += f"; {SHARED_MEMORY} writable (CUDA IPC)"
    except landlock.LandlockUnavailable as exc:
        report.missing.append(f"filesystem: Landlock is not available ({exc})")
    if gpu and shared_memory and _inside(str(workdir), [os.path.realpath(SHARED_MEMORY)]):
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
