"""A worker's lifeline: it ends itself, and what it started, once its parent is gone or its own
deadline has passed.

The parent holds the only write end of the worker's stdin (the job and the replies to its requests
come that way), so when the parent dies, even by SIGKILL, that pipe hangs up. A thread polls it for
the hang-up without reading (the channel reads it), and enforces a deadline the parent gives with
the job, so a worker whose parent's own timer died with it still stops. Ending means SIGKILL to the
processes of the worker's own memory cgroup, where the evaluator made one (`cgroup.procs` lists them
even when they left the process group, as ninja does, and reading it needs no other process's /proc
entry, which the sandbox closes), then to the worker's process group, itself included.
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time

POLL_S = 0.5
OWN_CGROUP = "kfoundry-"  # the memory guard's cgroups: only such a cgroup is emptied, never a shared one


def own_cgroup_procs() -> str | None:
    """The cgroup.procs file of this process's memory cgroup if the evaluator made it (v2 or v1), else None."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3 or OWN_CGROUP not in parts[2].rsplit("/", 1)[-1]:
            continue
        hierarchy, controllers, path = parts
        root = "/sys/fs/cgroup" if hierarchy == "0" else f"/sys/fs/cgroup/{controllers}"
        procs = os.path.join(root + path, "cgroup.procs")
        if os.path.exists(procs):
            return procs
    return None


def end_everything() -> None:
    """SIGKILL what this worker started (its cgroup's members, its process group), then itself."""
    me = os.getpid()
    procs = own_cgroup_procs()
    if procs is not None:
        try:
            with open(procs) as f:
                members = [int(line) for line in f if line.strip().isdigit()]
        except OSError:
            members = []
        for pid in members:
            if pid != me:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    except OSError:
        pass
    os.kill(me, signal.SIGKILL)


class Lifeline:
    """The watching thread; `set_deadline` once the job (and its time limit) is known."""

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self.deadline: float | None = None
        self.reason = ""
        self._thread = threading.Thread(target=self._watch, name="kfoundry-lifeline", daemon=True)

    def start(self) -> Lifeline:
        self._thread.start()
        return self

    def set_deadline(self, seconds: float | None) -> None:
        if seconds is not None and seconds > 0:
            self.deadline = time.monotonic() + seconds

    def _watch(self) -> None:
        poller = select.poll()
        poller.register(self.fd, 0)  # no events asked: a hang-up (or an error) is reported all the same
        while True:
            wait = POLL_S if self.deadline is None else max(0.0, min(POLL_S, self.deadline - time.monotonic()))
            if poller.poll(wait * 1000):
                self.reason = "the parent is gone"
                break
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self.reason = "the worker's own deadline passed"
                break
        try:
            os.write(2, f"kfoundry worker {os.getpid()}: {self.reason}: ending it and what it started\n".encode())
        except OSError:
            pass
        end_everything()


def watch(fd: int = 0) -> Lifeline:
    return Lifeline(fd).start()
