"""Workers die with their parent: kill -9 the evaluating process and every worker, and what a candidate
forked (in its process group or in one of its own), is gone within 2 s; a worker also ends itself at
its own deadline. Real processes: an evaluator in a session of its own, its judge and workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kfoundry.evaluate.parent.host_memory import process_tree
from kfoundry.sandbox import lifeline
from tests.helpers import alive

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "fixtures" / "problems" / "affine.py"

# forks two children that spin (one stays in the worker's process group, one makes its own, as ninja
# does), then sleeps in its constructor far longer than the test waits
CANDIDATE = textwrap.dedent(
    """
    import os
    import time

    import torch.nn as nn


    def spin(own_group):
        if os.fork() == 0:
            if own_group:
                os.setpgid(0, 0)
            while True:
                pass


    class ModelNew(nn.Module):
        def __init__(self, *args):
            super().__init__()
            spin(False)
            spin(True)
            time.sleep(300)
    """
)
RUNNER = r"""
import sys
from pathlib import Path
from kfoundry.evaluate import EvalOptions, Evaluator
options = EvalOptions(device="cpu", trials=1, seed=3, guard=False, timeout_s=200)
with Evaluator(sys.argv[1], options) as evaluator:
    evaluator.evaluate(sys.argv[2])
"""


def _stat(pid: int) -> tuple[int, int]:
    """(ppid, pgid)"""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[2])


WORKER_COMMANDS = (b"kfoundry.sandbox.start", b"kfoundry.evaluate.worker.fork_server")  # started, or forked from a server


def _ours(pid: int) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return any(mark in command for mark in WORKER_COMMANDS)


def _worker(pid: int) -> bool:
    """A worker: started by the evaluator itself, or forked by a fork server (which the evaluator started)."""
    try:
        ppid, _ = _stat(pid)
    except (OSError, IndexError):
        return False
    if not _ours(pid):
        return False
    if not _ours(ppid):
        return b"kfoundry.sandbox.start" in Path(f"/proc/{pid}/cmdline").read_bytes()
    grandparent, _ = _stat(ppid)
    return not _ours(grandparent)  # its parent is a server, not a worker


def _spinners(tree: list[int]) -> dict[str, int]:
    """The candidate's two forked children: processes of a worker's command whose parent is a worker."""
    found = {}
    for pid in tree:
        try:
            ppid, pgid = _stat(pid)
        except (OSError, IndexError):
            continue
        if _ours(pid) and _worker(ppid):
            found["own group" if pgid == pid else "worker's group"] = pid
    return found


@pytest.mark.timeout(300)
def test_killing_the_parent_ends_every_worker_and_what_a_candidate_forked(tmp_path):
    candidate = tmp_path / "spinner.py"
    candidate.write_text(CANDIDATE)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    parent = subprocess.Popen([sys.executable, "-c", RUNNER, str(PROBLEM), str(candidate)], cwd=tmp_path, env=env,
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 200
        spinners: dict[str, int] = {}
        while len(spinners) < 2:
            assert parent.poll() is None, parent.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the candidate's children never appeared"
            time.sleep(0.2)
            spinners = _spinners(process_tree(parent.pid))
        tree = [pid for pid in process_tree(parent.pid) if pid != parent.pid]
        workers = [pid for pid in tree if pid not in spinners.values()]
        assert len(workers) >= 2  # the judge and the candidate's worker (and its spare, if started)
        in_own_cgroup = lifeline.OWN_CGROUP in Path(f"/proc/{spinners['own group']}/cgroup").read_text()
        os.killpg(parent.pid, signal.SIGKILL)  # the parent's group only: the workers lead sessions of their own
        parent.wait()
        ended = time.monotonic() + 2.0
        while time.monotonic() < ended and any(alive(pid) for pid in tree):
            time.sleep(0.05)
        survivors = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:80] for pid in tree if alive(pid)}
        assert not {p for p in survivors if p != spinners["own group"]}, survivors
        if in_own_cgroup:  # ninja's way out of the group is closed by the worker's memory cgroup
            assert not survivors, survivors
    finally:
        for pid in process_tree(parent.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in (spinners or {}).values():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def test_a_worker_ends_itself_at_its_own_deadline_and_when_its_parent_hangs_up(tmp_path):
    child = (
        "import sys, time\n"
        "from kfoundry.sandbox import lifeline\n"
        "line = lifeline.watch()\n"
        "line.set_deadline(float(sys.argv[1]))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    outcomes = {}
    for case, deadline in (("deadline", "0.5"), ("hang-up", "0")):
        started = time.monotonic()
        process = subprocess.Popen([sys.executable, "-c", child, deadline], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
        assert process.stdout.readline() == b"ready\n"
        if case == "hang-up":
            process.stdin.close()  # what the parent's death does to the pipe
        process.wait(timeout=10)
        outcomes[case] = (process.returncode, time.monotonic() - started, process.stderr.read().decode())
    assert outcomes["deadline"][0] == -signal.SIGKILL and "own deadline" in outcomes["deadline"][2]
    assert outcomes["hang-up"][0] == -signal.SIGKILL and "parent is gone" in outcomes["hang-up"][2]
    assert all(seconds < 5 for _, seconds, _ in outcomes.values())


def test_only_a_cgroup_of_ours_is_emptied():
    # this test's own cgroup is the machine's or the CI job's: never one to empty
    assert lifeline.own_cgroup_procs() is None
