"""A fork server: the process that CPU workers are forked from, run as `python -m
kfoundry.evaluate.worker.fork_server`. The parent's side, which starts it and asks it for workers, is
kfoundry.evaluate.parent.forkserver (its docstring says why they are forked).

It starts with the evaluation environment's allow-list (no key), imports torch, Triton and the worker's
modules, says `ready`, then forks a child for each request; it never creates a CUDA context, runs no
parallel region of torch and starts no thread, and it is non-dumpable. A child becomes exactly the worker
`python -m kfoundry.sandbox.start` would be. The server reaps its children and reports each one's exit
status to the parent.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
from typing import Any

from kfoundry.evaluate.shared.protocol import CHANNEL_FD_ENV, FORK_FD_ENV, MAX_MESSAGE


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
        env = dict(request["env"])
        env[CHANNEL_FD_ENV] = str(channel)  # its number here, not the parent's
        os.environ.clear()
        os.environ.update(env)
        from kfoundry.evaluate.worker.entry import FAST_EXIT_LABELS
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


# modules every child imported after its fork, each time, until the server imported them first: the extension
# builders that a candidate's launch tracker and a judge wrap (torch.utils.cpp_extension, with setuptools),
# Triton's Gluon front end (imported at a kernel's first launch), the judge's flop counter and torch's save
# settings (entry._fast_saves); about 0.1 CPU-s a candidate worker on the 2-core CI machine. The server's import
# path is its children's already (extend_sys_path; a child only puts its problem's folder first), so setuptools
# appends its folder where it did in the child
AFTER_FORK = ("torch.utils.cpp_extension", "torch.utils.flop_counter", "torch.utils.serialization",
              "triton.experimental.gluon")


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
    import kfoundry.evaluate.worker.entry  # noqa: F401
    # the jobs' modules (0.1 s), which a child would otherwise import after its fork, each time
    import kfoundry.evaluate.reference.baseline_job  # noqa: F401
    import kfoundry.evaluate.worker.candidate_job  # noqa: F401
    import kfoundry.evaluate.reference.judge_job  # noqa: F401
    import kfoundry.evaluate.reference.reference_job  # noqa: F401
    import kfoundry.sandbox.lifeline  # noqa: F401
    import kfoundry.sandbox.policy  # noqa: F401
    for name in AFTER_FORK:  # what a child would otherwise import again after its fork, each time
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 -- absent (an older torch or Triton) or broken: a child meets it as before
            pass

    if threading.active_count() != 1:  # a fork copies no thread but the caller's: their locks would stay held
        print(f"the fork server has {threading.active_count()} threads after its imports", file=sys.stderr)
        return 1
    return _serve(sock)


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # no teardown: exit hooks that a module registered at import are its children's, not its
