"""One GPU shared by several of our processes: a readers-writer lock over two `flock` files.

The reference process, the baseline-timing process and the candidate workers all use one GPU.
Compiling, checking correctness, comparing outputs and creating a CUDA context may overlap each
other ("shared" phases); timing must run alone, or the numbers measure the neighbours
("exclusive" phases). While any process is in an exclusive phase, no other process of ours is in
any GPU phase, and only one process is exclusive at a time.

Why `fcntl.flock` on files named by path: the processes are unrelated (no common parent object to
hand a semaphore through), and the kernel drops a flock when its holder dies, so a worker killed
with SIGKILL in the middle of timing never leaves the GPU locked.

Why two files: plain flock lets shared holders keep arriving forever while an exclusive request
waits, and timing would starve behind a stream of compiles. The second file is a turnstile. A
shared request passes through it (take it, take the main lock shared, drop it); an exclusive
request takes it and keeps it until it is done, so once an exclusive request waits for the main
lock, new shared requests queue behind it at the turnstile. Exclusive requests also queue there,
one after another.

The optional timeline is an append-only JSON-lines file of acquire and release events, for tests
and benchmark output: `read_timeline` turns it into `Span`s, `exclusive_overlaps` checks the
guarantee, `concurrency` says how much sharing happened, `render_timeline` draws it. Acquire
times are taken right after the flock succeeds and release times right before the unlock, so a
recorded span lies inside the real holding interval and recorded spans that do not overlap prove
that the holds did not overlap.

Caveats: a lock object belongs to one thread (threads each make their own, or share a `ThreadLocks`;
two objects on the same file contend like two processes, so one thread holding two of them can
deadlock itself). A child
made by `fork` without `exec` shares the parent's open files and hence its flocks; the object
notices the new pid and opens files of its own before taking anything in the child.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ENV_LOCK = "KFOUNDRY_GPU_LOCK"
ENV_TIMELINE = "KFOUNDRY_GPU_TIMELINE"

SHARED = "shared"
EXCLUSIVE = "exclusive"


def lock_path(device: str) -> str:
    """The lock file of one device for this user: all our processes on it must open the same one.

    The uid is in the name so that two users on one machine do not share (or fight over the
    permissions of) one file; the device is in it so that two GPUs are scheduled independently.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", device).strip("-") or "device"
    return os.path.join(tempfile.gettempdir(), f"kfoundry-{os.getuid()}-{safe}.gpu.lock")


def from_environment(label: str = "") -> GpuLock | None:
    """The lock the parent assigned to this worker, or None: CPU workers are given none."""
    path = os.environ.get(ENV_LOCK)
    if not path:
        return None
    return GpuLock(path, timeline=os.environ.get(ENV_TIMELINE) or None, label=label)


class NoLock:
    """Stands for the GPU lock where there is none (a CPU worker): its phases hold nothing."""

    waited_s = 0.0  # as GpuLock's: it never waits

    def shared(self, phase: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def exclusive(self, phase: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def off_gpu(self, phase: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


def process_lock(label: str = "") -> GpuLock | NoLock:
    """This process's GPU lock as the parent assigned it, or a NoLock: the same phases either way."""
    return from_environment(label) or NoLock()


class ThreadLocks:
    """The process's GPU lock for a process that holds it from several threads (the judge serves orders
    at once): each thread gets a lock object of its own on first use, since one object belongs to one
    thread. Its phases are those of the calling thread's object."""

    def __init__(self, label: str = "") -> None:
        self.label = label
        self._local = threading.local()

    def current(self) -> GpuLock | NoLock:
        lock = getattr(self._local, "lock", None)
        if lock is None:
            lock = self._local.lock = process_lock(self.label)
        return lock

    def shared(self, phase: str) -> contextlib.AbstractContextManager[None]:
        return self.current().shared(phase)

    def exclusive(self, phase: str) -> contextlib.AbstractContextManager[None]:
        return self.current().exclusive(phase)

    def off_gpu(self, phase: str) -> contextlib.AbstractContextManager[None]:
        return self.current().off_gpu(phase)


class GpuLock:
    """Shared and exclusive GPU phases across processes (see the module docstring).

    Nesting within one object:
    - `shared()` inside `shared()`: counted, no lock operation; the outer phase names the hold.
    - `shared()` or `exclusive()` inside `exclusive()`: no-op, exclusive covers it.
    - `exclusive()` inside `shared()`: an upgrade. The shared hold is released first, then the
      exclusive lock is taken through the turnstile like any other exclusive request (taking it
      while keeping the shared hold would deadlock against any other shared holder that upgrades
      at the same time, and would let no one else run). On exit the lock is turned back into a
      shared hold while the turnstile is still held, so going back cannot wait behind another
      exclusive request; the outer shared phase is then resumed. Between the two, other processes
      may run: nothing the outer shared phase did is protected across the upgrade.
    """

    def __init__(self, path: str | os.PathLike, *, timeline: str | os.PathLike | None = None,
                 label: str = "") -> None:
        self.path = os.fspath(path)
        self.turnstile_path = self.path + ".turnstile"
        self.timeline = os.fspath(timeline) if timeline is not None else None
        self.label = label
        self.waited_s = 0.0  # total seconds spent waiting to acquire, for reports of GPU contention
        self._shared_depth = 0
        self._shared_phase = ""
        self._exclusive_depth = 0
        self._open()

    def _open(self) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # Our own open file descriptions: a flock belongs to the description, not the process.
        self._main = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self._turnstile = os.open(self.turnstile_path, os.O_RDWR | os.O_CREAT, 0o600)
        self._pid = os.getpid()

    def _check_fork(self) -> None:
        """In a forked child, drop the inherited descriptions: unlocking them would unlock the parent."""
        if os.getpid() == self._pid:
            return
        os.close(self._main)  # closing our copy leaves the parent's lock alone
        os.close(self._turnstile)
        self._shared_depth = self._exclusive_depth = 0
        self._open()

    def close(self) -> None:
        """Close the lock files (releases whatever this object holds)."""
        for fd in (self._main, self._turnstile):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._shared_depth = self._exclusive_depth = 0

    @property
    def held(self) -> str | None:
        """"exclusive", "shared" or None: what this object holds now."""
        if self._exclusive_depth:
            return EXCLUSIVE
        return SHARED if self._shared_depth else None

    # -- the public phases ---------------------------------------------------------------------

    @contextlib.contextmanager
    def shared(self, phase: str) -> Iterator[None]:
        """GPU work that may overlap other shared work (compile, correctness, CUDA context)."""
        self._check_fork()
        if self._exclusive_depth:
            yield  # exclusive covers it
            return
        if self._shared_depth:
            self._shared_depth += 1
            try:
                yield
            finally:
                self._shared_depth -= 1
            return
        self._acquire_shared(phase)
        self._shared_depth, self._shared_phase = 1, phase
        try:
            yield
        finally:
            self._shared_depth = 0
            self._release(SHARED, phase)

    @contextlib.contextmanager
    def exclusive(self, phase: str) -> Iterator[None]:
        """GPU work that must run alone (timing); upgrades a shared hold of this object."""
        self._check_fork()
        if self._exclusive_depth:
            self._exclusive_depth += 1
            try:
                yield
            finally:
                self._exclusive_depth -= 1
            return
        if not self._shared_depth:
            self._acquire_exclusive(phase)
            self._exclusive_depth = 1
            try:
                yield
            finally:
                self._exclusive_depth = 0
                self._release(EXCLUSIVE, phase)
            return
        # the upgrade: give the shared hold up, queue for exclusive, then turn back into shared
        outer = self._shared_phase
        self._release(SHARED, outer)
        try:
            self._acquire_exclusive(phase)
        except BaseException:
            self._acquire_shared(outer)  # the outer shared() still expects to hold it
            raise
        self._exclusive_depth = 1
        try:
            yield
        finally:
            self._exclusive_depth = 0
            self._event(EXCLUSIVE, phase, "release")
            fcntl.flock(self._main, fcntl.LOCK_SH)  # no wait: exclusive requesters need the turnstile
            self._event(SHARED, outer, "acquire")
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def off_gpu(self, phase: str) -> Iterator[None]:
        """CPU-only work inside a shared phase (Triton compiling a kernel, a C++ extension build): the
        shared hold is given up meanwhile, so a timing can run, and taken again (through the turnstile)
        after. Inside an exclusive phase nothing changes: the timing keeps the GPU to itself."""
        self._check_fork()
        if self._exclusive_depth or not self._shared_depth:
            yield
            return
        depth, outer = self._shared_depth, self._shared_phase
        self._release(SHARED, outer)
        self._shared_depth = 0
        try:
            yield
        finally:
            self._acquire_shared(outer)
            self._shared_depth, self._shared_phase = depth, outer

    # -- lock operations -----------------------------------------------------------------------

    def _acquire_shared(self, phase: str) -> None:
        start = time.monotonic()
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)  # waits while an exclusive request waits or holds
        try:
            fcntl.flock(self._main, fcntl.LOCK_SH)  # does not wait: an exclusive holder holds the turnstile
        finally:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        self._event(SHARED, phase, "acquire")
        self.waited_s += time.monotonic() - start

    def _acquire_exclusive(self, phase: str) -> None:
        start = time.monotonic()
        fcntl.flock(self._turnstile, fcntl.LOCK_EX)  # kept until release: new shared requests queue
        try:
            fcntl.flock(self._main, fcntl.LOCK_EX)  # waits for the shared holders to drain
        except BaseException:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)
            raise
        self._event(EXCLUSIVE, phase, "acquire")
        self.waited_s += time.monotonic() - start

    def _release(self, mode: str, phase: str) -> None:
        if os.getpid() != self._pid:
            return  # forked child leaving a block the parent entered: the hold is the parent's
        self._event(mode, phase, "release")
        fcntl.flock(self._main, fcntl.LOCK_UN)
        if mode == EXCLUSIVE:
            fcntl.flock(self._turnstile, fcntl.LOCK_UN)

    def _event(self, mode: str, phase: str, event: str) -> None:
        """One JSON line, one O_APPEND write: lines of several processes never interleave."""
        if self.timeline is None:
            return
        record = {"pid": os.getpid(), "label": self.label, "phase": phase, "mode": mode,
                  "event": event, "t": time.monotonic()}
        fd = os.open(self.timeline, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
        finally:
            os.close(fd)


# -- the timeline ------------------------------------------------------------------------------


@dataclass
class Span:
    """One held phase of one process; times are `time.monotonic()` (CLOCK_MONOTONIC on Linux,
    one clock for every process on the machine)."""

    pid: int
    label: str
    phase: str
    mode: str  # "shared" | "exclusive"
    start: float
    end: float
    released: bool = True  # False: no release line (the holder died); `end` is the file's last time


def read_timeline(path: str | os.PathLike) -> list[Span]:
    """The spans of a timeline file, by start time.

    Each process's acquire line is paired with its next release line of the same label, phase and
    mode. A span with no release (a killed holder) ends at the last timestamp in the file; it is
    marked `released=False`, since it then overlaps whatever came after the kill. Lines that do not
    parse (a file truncated by hand) are skipped.
    """
    open_spans: dict[tuple[int, str, str, str], list[float]] = {}
    spans: list[Span] = []
    last = float("-inf")
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
            key = (int(record["pid"]), str(record["label"]), str(record["phase"]), str(record["mode"]))
            t, event = float(record["t"]), record["event"]
        except (ValueError, KeyError, TypeError):
            continue
        last = max(last, t)
        if event == "acquire":
            open_spans.setdefault(key, []).append(t)
        elif event == "release" and open_spans.get(key):
            spans.append(Span(*key, start=open_spans[key].pop(), end=t))
    for key, starts in open_spans.items():
        spans.extend(Span(*key, start=start, end=last, released=False) for start in starts)
    spans.sort(key=lambda span: (span.start, span.end))
    return spans


def _overlap(a: Span, b: Span) -> bool:
    return a.start < b.end and b.start < a.end


def exclusive_overlaps(spans: list[Span]) -> list[tuple[Span, Span]]:
    """Every (exclusive span, span of another process) pair that overlaps in time: should be none.

    Two overlapping exclusive spans are reported once. Spans of one process are never counted
    against each other (an upgrade nests an exclusive span in the time of a shared phase).
    """
    found = []
    for i, a in enumerate(spans):
        if a.mode != EXCLUSIVE:
            continue
        for j, b in enumerate(spans):
            if b.pid == a.pid or (b.mode == EXCLUSIVE and j < i):
                continue
            if _overlap(a, b):
                found.append((a, b))
    return found


def concurrency(spans: list[Span], mode: str = SHARED) -> int:
    """The largest number of spans of `mode` held at one instant (spans that only touch do not count)."""
    edges = sorted([(s.start, 1) for s in spans if s.mode == mode] + [(s.end, -1) for s in spans if s.mode == mode])
    best = held = 0
    for _, step in edges:  # at equal times the end (-1) sorts first
        held += step
        best = max(best, held)
    return best


def render_timeline(spans: list[Span], width: int = 100) -> str:
    """A text chart for benchmark output: one row per (pid, label) over a common time axis,
    '=' where a shared phase is held and '#' where an exclusive one is ('#' wins a shared cell)."""
    if not spans:
        return "(no GPU lock spans)"
    width = max(width, 1)
    t0 = min(s.start for s in spans)
    total = max(s.end for s in spans) - t0
    scale = width / total if total > 0 else 0.0
    rows: dict[tuple[int, str], list[str]] = {}
    for span in sorted(spans, key=lambda s: s.start):
        cells = rows.setdefault((span.pid, span.label), [" "] * width)
        first = min(int((span.start - t0) * scale), width - 1)
        last = max(first + 1, min(width, math.ceil((span.end - t0) * scale)))  # at least one cell
        mark = "#" if span.mode == EXCLUSIVE else "="
        for k in range(first, last):
            if cells[k] != "#":
                cells[k] = mark
    names = {key: f"{key[0]} {key[1]}".rstrip() for key in rows}
    pad = max(len(name) for name in names.values())
    lines = [f"{'':{pad}} |{f'0 s':<{width // 2}}{f'{total:.3f} s':>{width - width // 2}}|"]
    lines += [f"{names[key]:{pad}} |{''.join(cells)}|" for key, cells in rows.items()]
    lines.append(f"{'':{pad}}  '=' shared  '#' exclusive")
    return "\n".join(lines)
