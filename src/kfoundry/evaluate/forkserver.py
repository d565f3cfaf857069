"""Workers forked from a process that has imported torch and Triton already, instead of each one
importing them again (3 CPU-seconds a worker here, and the biggest CPU consumer of a GPU run while
candidates compile).

The server (`python -m kfoundry.evaluate.forkserver`) starts with the evaluation environment's
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

from kfoundry.evaluate.host_memory import exited

FORK_FD_ENV = "KFOUNDRY_FORK_SERVER_FD"
ENABLE_ENV = "KFOUNDRY_FORK_SERVER"
FORK_DEVICES = ("cpu",)
READY_TIMEOUT_S = 300.0
MAX_MESSAGE = 1 << 20


class ForkServerError(RuntimeError):
    """The server could not start or fork: the caller starts its worker the ordinary way."""


# -- the parent's side ---------------------------------------------------------------------------------


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
                [sys.executable, "-m", "kfoundry.evaluate.forkserver"], env={**env, FORK_FD_ENV: str(theirs.fileno())},
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


# -- the server's side ---------------------------------------------------------------------------------


def _child(request: dict[str, Any], fds: list[int], keep_out: list[int]) -> None:
    """In the forked child: become the worker `python -m kfoundry.sandbox.start` would be. Never returns."""
    code = 70
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in keep_out:
            os.close(fd)
        os.setsid()
        if request.get("cgroup_procs"):
            with open(request["cgroup_procs"], "w") as f:  # its memory budget, before it allocates anything
                f.write(str(os.getpid()))
        stdin, log, channel, _lock = fds  # the folder's lock stays open for the worker's life, as Popen's pass_fds
        os.dup2(stdin, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for fd in (stdin, log):
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        if sys.path[:1] == ["/"]:  # the server's own working directory, as `python -m` put it first
            sys.path[0] = request["cwd"]
        from kfoundry.evaluate.process import CHANNEL_FD_ENV

        env = dict(request["env"])
        env[CHANNEL_FD_ENV] = str(channel)  # its number here, not the parent's
        os.environ.clear()
        os.environ.update(env)
        from kfoundry.evaluate.worker import FAST_EXIT_LABELS
        from kfoundry.sandbox import start

        code = start.main() or 0
        if env.get("KFOUNDRY_WORKER_LABEL", "") not in FAST_EXIT_LABELS:
            import atexit

            atexit._run_exitfuncs()  # the interpreter's teardown, as a process of its own would run it
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 -- the worker's own failure: its log says why
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _serve(sock: socket.socket) -> int:
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sock.send(json.dumps({"ready": True}).encode())
    while True:
        readable = select.select([sock, wake_read], [], [])[0]
        if wake_read in readable:
            os.read(wake_read, 4096)
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                sock.send(json.dumps({"exit": pid, "status": status}).encode())
        if sock in readable:
            try:
                data, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, 8)
            except OSError:
                data, fds = b"", []
            if not data:
                return 0  # the parent is gone; its children keep their own lifelines
            request = json.loads(data)
            if len(fds) != 4:
                for fd in fds:
                    os.close(fd)
                sock.send(json.dumps({"token": request.get("token"), "error": "expected 4 descriptors"}).encode())
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request, fds, [sock.fileno(), wake_read, wake_write])
            for fd in fds:
                os.close(fd)
            sock.send(json.dumps({"token": request["token"], "pid": pid}).encode())


def main() -> int:
    sock = socket.socket(fileno=int(os.environ.pop(FORK_FD_ENV)))
    from kfoundry.sandbox.process_flags import make_non_dumpable

    make_non_dumpable()
    from kfoundry.sandbox.environment import extend_sys_path

    extend_sys_path()  # the parent's import path entries that a fresh interpreter lacks: torch may be in one
    import torch  # noqa: F401 -- what every worker would import: done once, here
    # torch imports its compiler front end lazily, at the first call of a function it keeps out of tracing
    # (torch.manual_seed, torch.softmax): 1.3-2.6 CPU-seconds in every judge and worker otherwise
    import torch._dynamo  # noqa: F401

    try:
        import triton  # noqa: F401
    except ImportError:
        pass
    import kfoundry.evaluate.worker  # noqa: F401
    # the jobs' modules (0.1 s), which a child would otherwise import after its fork, each time
    import kfoundry.evaluate.baseline_job  # noqa: F401
    import kfoundry.evaluate.candidate_job  # noqa: F401
    import kfoundry.evaluate.judge_job  # noqa: F401
    import kfoundry.evaluate.reference_job  # noqa: F401
    import kfoundry.sandbox.lifeline  # noqa: F401
    import kfoundry.sandbox.policy  # noqa: F401

    if threading.active_count() != 1:  # a fork copies no thread but the caller's: their locks would stay held
        print(f"the fork server has {threading.active_count()} threads after its imports", file=sys.stderr)
        return 1
    return _serve(sock)


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # no teardown: exit hooks that a module registered at import are its children's, not its
