"""Run a command that dies with its parent: `python -S parent_guard.py PARENT_PID COMMAND...`.

A Ray actor killed outright (SIGKILL, the OOM killer, a lost node) cannot stop the candidate worker it
started; that worker would go on holding its GPU, with no one left to enforce its timeout. Run as the
worker's wrapper, this asks Linux to SIGKILL the worker when its parent dies (PR_SET_PDEATHSIG, kept across
exec), then becomes the worker. It also drops Ray's variables, which a candidate has no use for.
Standalone on purpose (no kfoundry import): it runs before every candidate worker.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main() -> None:
    parent, command = int(sys.argv[1]), sys.argv[2:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the request took effect
            sys.exit(1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    main()
