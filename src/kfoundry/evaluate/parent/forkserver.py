"""Workers forked from a process that has imported torch and Triton already, instead of each one
importing them again (3 CPU-seconds a worker here, and the biggest CPU consumer of a GPU run while
candidates compile). This module is the parent's side; the server is kfoundry.evaluate.worker.fork_server.

The server (`python -m kfoundry.evaluate.worker.fork_server`) starts with the evaluation environment's
allow-list (no key), imports torch, Triton and the worker's modules, says `ready`, then forks a child
for each request. It never creates a CUDA context, runs no parallel region of torch (a fork after
either is unsafe) and starts no thread, and it is non-dumpable, so no child can read or write its
memory through /proc. A child leads a session of its own, joins its memory cgroup, takes the
request's descriptors as its stdin, its log (stdout and stderr) and its channel to the parent, moves
into its folder, takes the request's environment, and then runs exactly what `python -m
kfoundry.sandbox.start` runs: its sandbox first, then the worker. Candidates get a server of their own,
apart from the judge's and the baseline process's, so nothing a candidate does to one could reach
the reference side. The server reaps its children and reports each one's exit status, which
`ForkedProcess` (the parent's stand-in for `subprocess.Popen`) gives as its returncode.

Used on the CPU (`FORK_DEVICES`); a GPU worker and a worker under a wrapper (ncu, compute-sanitizer)
start as their own process. KFOUNDRY_FORK_SERVER=0 turns it off.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from kfoundry.evaluate.parent.host_memory import exited
from kfoundry.evaluate.shared.protocol import FORK_FD_ENV, MAX_MESSAGE

ENABLE_ENV = "KFOUNDRY_FORK_SERVER"
FORK_DEVICES = ("cpu",)
READY_TIMEOUT_S = 300.0


class ForkServerError(RuntimeError):
    """The server could not start or fork: the caller starts its worker the ordinary way."""


class ForkedProcess:
    """A forked worker as the parent sees it: the parts of `subprocess.Popen` that Worker uses."""

    def __init__(self, server: ForkServer, pid: int, stdin_fd: int) -> None:
        self.server, self.pid = server, pid
        self.stdin = os.fdopen(stdin_fd, "wb")
        self.returncode: int | None = None
        self._ended = threading.Event()

    def _exited(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)
        self._ended.set()

    def poll(self) -> int | None:
        if self.returncode is None and self.server.gone and exited(self.pid):
            self.returncode = 255  # its status went with the server
            self._ended.set()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            self._ended.wait(0.2 if left is None else min(left, 0.2))
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class ForkServer:
    """One server process and the thread that reads its replies."""

    def __init__(self, env: dict[str, str], role: str) -> None:
        self.role = role
        self.gone = False
        self._lock = threading.Lock()
        self._next = 0
        self._waiting: dict[int, tuple[threading.Event, dict[str, Any]]] = {}
        self._children: dict[int, ForkedProcess] = {}
        self._early: dict[int, int] = {}  # exit statuses of children not yet registered
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._socket = ours
        log = tempfile.TemporaryFile()  # its own warnings; its children write to their folders' logs
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kfoundry.evaluate.worker.fork_server"],
                env={**env, FORK_FD_ENV: str(theirs.fileno())},
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(theirs.fileno(),),
                start_new_session=True, cwd="/")  # a child moves to its folder; the server writes nowhere
        finally:
            theirs.close()
        self._log = log
        self._ready = threading.Lock()  # held while the first spawn waits for the server's imports
        self._reader: threading.Thread | None = None

    def wait_ready(self) -> None:
        """Block until the server has imported (the first spawn does this): servers started together
        import at once, so an evaluator's two cost one import's time, not two."""
        with self._ready:
            if self._reader is not None:
                return
            if self.gone:
                raise ForkServerError("the fork server did not start")
            ready = self._socket.recv(MAX_MESSAGE) if self._wait_readable(READY_TIMEOUT_S) else b""
            if json.loads(ready or b"{}").get("ready") is not True:
                self.gone = True
                self.process.kill()
                self._log.seek(0)
                error = self._log.read().decode(errors="replace")[-2000:]
                self._log.close()
                raise ForkServerError(f"the fork server did not start: {error or 'no reply'}")
            self._log.close()
            self._reader = threading.Thread(target=self._read, daemon=True, name=f"kfoundry-forkserver-{self.role}")
            self._reader.start()

    @property
    def idle(self) -> bool:
        """No child of it is alive (as far as its exit reports say)."""
        with self._lock:
            return not self._children

    def _wait_readable(self, timeout_s: float) -> bool:
        return bool(select.select([self._socket], [], [], timeout_s)[0])

    def _read(self) -> None:
        while True:
            try:
                data = self._socket.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            with self._lock:
                if "exit" in message:
                    child = self._children.pop(message["exit"], None)
                    if child is None:
                        self._early[message["exit"]] = message["status"]
                    else:
                        child._exited(message["status"])
                elif message.get("token") in self._waiting:
                    event, reply = self._waiting.pop(message["token"])
                    reply.update(message)
                    event.set()
        with self._lock:
            self.gone = True
            waiting, self._waiting = self._waiting, {}
        for event, reply in waiting.values():
            reply["error"] = "the fork server ended"
            event.set()

    def spawn(self, *, env: dict[str, str], cwd: str, log: int, channel: int, keep: int,
              cgroup_procs: str | None) -> ForkedProcess:
        """Fork a worker with `log` as its stdout and stderr, `channel` (the caller closes its copy, as after
        Popen) and `keep` (held open for its life); its stdin is a new pipe whose write end the returned
        process holds as `stdin`."""
        self.wait_ready()
        read_end, write_end = os.pipe()
        event, reply = threading.Event(), {}
        with self._lock:
            if self.gone:
                os.close(read_end), os.close(write_end)
                raise ForkServerError("the fork server has ended")
            self._next += 1
            token = self._next
            self._waiting[token] = (event, reply)
        request = {"token": token, "env": env, "cwd": cwd, "cgroup_procs": cgroup_procs}
        try:
            socket.send_fds(self._socket, [json.dumps(request).encode()], [read_end, log, channel, keep])
        except OSError as exc:
            os.close(write_end)
            raise ForkServerError(f"the fork server is unreachable ({exc})") from None
        finally:
            os.close(read_end)
        if not event.wait(READY_TIMEOUT_S) or "pid" not in reply:
            os.close(write_end)
            raise ForkServerError(f"the fork server did not fork: {reply.get('error', 'no reply')}")
        child = ForkedProcess(self, reply["pid"], write_end)
        with self._lock:
            if child.pid in self._early:
                child._exited(self._early.pop(child.pid))
            else:
                self._children[child.pid] = child
        return child

    def close(self) -> None:
        if not self._log.closed:  # never waited for
            self._log.close()
        try:
            self._socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._socket.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


_servers: dict[tuple[str, str], ForkServer] = {}
_servers_lock = threading.Lock()


ROLES = 2  # servers an evaluator starts: one for its candidates, one for its judge and baseline process


def enabled(device: str) -> bool:
    """Whether workers for this device are forked from a server."""
    return device in FORK_DEVICES and os.environ.get(ENABLE_ENV, "1") != "0"


def server_for(device: str, label: str, env: dict[str, str]) -> ForkServer | None:
    """The server for this kind of worker and environment (started on first use, and maybe still
    importing: its first spawn waits), or None where workers start as processes of their own: a GPU, a
    disabled server, one that could not be started. `env`: what the server starts with, the part of a
    worker's environment that is the same for every worker."""
    if not enabled(device):
        return None
    from kfoundry.sandbox.start import REFERENCE_LABELS

    role = "reference" if label in REFERENCE_LABELS else "candidate"
    key = (role, json.dumps(env, sort_keys=True))
    with _servers_lock:
        server = _servers.get(key)
        if server is not None and server.gone:
            server = None
        if server is None:
            try:
                server = _servers[key] = ForkServer(env, role)
            except (ForkServerError, OSError):
                return None
            _close_idle(keep=server)
    return server


MAX_SERVERS = 4  # servers kept at once (each holds torch's memory); one per distinct environment


def _close_idle(keep: ForkServer) -> None:
    """Past MAX_SERVERS, close the oldest servers with no child alive (a child's exit status would go with
    its server)."""
    for key, server in list(_servers.items()):
        if len(_servers) <= MAX_SERVERS:
            return
        if server is not keep and (server.gone or server.idle):
            del _servers[key]
            server.close()


def close_all() -> None:
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.close()
