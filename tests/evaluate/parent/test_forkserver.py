"""kfoundry.evaluate.parent.forkserver: CPU workers forked from a server that imported torch once. Real
processes: each test's workers come from the session's servers (one for candidates, one for the
reference side), as in every other test of the suite."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from kfoundry.evaluate.parent import forkserver
from kfoundry.evaluate.parent.forkserver import ForkedProcess
from kfoundry.evaluate.parent.process import Worker
from tests.helpers import alive

# a worker job kind that does not exist: the worker reports an internal error and exits 0
NO_JOB = {"kind": "nothing"}


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def test_a_forked_worker_is_a_worker_of_its_own(monkeypatch):
    """Its own session, folder, environment (the request's, not the server's) and exit status."""
    monkeypatch.setenv("KF_TEST_API_KEY", "sk-test")  # never in a worker's environment, forked or not
    with Worker("cpu", label="candidate", extra_env={"KF_TEST_MARK": "one"}) as worker:
        assert isinstance(worker.process, ForkedProcess)
        assert worker.wait_ready(120)
        pid = worker.process.pid
        environ = dict(item.split("=", 1) for item in
                       Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in item)
        assert os.path.realpath(f"/proc/{pid}/cwd") == os.path.realpath(worker.workdir)
        assert int(_stat(pid)[3]) == pid  # leads its session, so the parent's kill of it reaches all it started
        outcome = worker.run(NO_JOB, timeout_s=60)
        sandbox = worker.sandbox
    assert outcome.returncode == 0 and "internal_error" in (outcome.result or {})
    assert "KF_TEST_API_KEY" not in environ  # what /proc shows is the server's allow-listed start
    assert sandbox.get("environment") == "allow-list" and "missing" in sandbox, sandbox  # start.main's record


def test_a_killed_worker_reports_the_signal():
    with Worker("cpu", label="candidate") as worker:
        assert worker.wait_ready(120)
        os.kill(worker.process.pid, signal.SIGKILL)
        assert worker.process.wait(timeout=30) == -signal.SIGKILL
        assert worker.process.poll() == -signal.SIGKILL


def test_candidates_and_the_reference_side_have_servers_of_their_own():
    with Worker("cpu", label="candidate") as candidate, Worker("cpu", label="judge") as judge:
        assert candidate.process.server is not judge.process.server
        assert (candidate.process.server.role, judge.process.server.role) == ("candidate", "reference")


def test_switched_off_workers_start_as_processes_of_their_own(monkeypatch):
    monkeypatch.setenv(forkserver.ENABLE_ENV, "0")
    with Worker("cpu", label="candidate") as worker:
        assert isinstance(worker.process, subprocess.Popen)
        assert worker.run(NO_JOB, timeout_s=120).returncode == 0


def test_a_worker_under_a_wrapper_is_not_forked():
    with Worker("cpu", wrapper=["sh", "-c", "exit 3", "sh"]) as worker:
        assert isinstance(worker.process, subprocess.Popen)
        assert worker.process.wait(timeout=30) == 3


def test_a_server_that_dies_is_replaced_and_its_orphans_still_end(monkeypatch):
    monkeypatch.setattr(forkserver, "_servers", {})  # servers of this test alone
    with Worker("cpu", label="candidate") as first:
        assert first.wait_ready(120)
        server = first.process.server
        server.process.kill()
        server.process.wait()
        deadline = time.monotonic() + 10
        while not server.gone and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.gone
        assert first.process.poll() is None  # still running: its status went with the server
        os.kill(first.process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive(first.process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.process.poll() == 255  # gone, with no status to tell
        with Worker("cpu", label="candidate") as second:
            assert second.process.server is not server
            assert second.run(NO_JOB, timeout_s=120).returncode == 0
    forkserver.close_all()


def test_the_server_refuses_to_fork_with_threads_running(tmp_path):
    """A fork copies only the calling thread: a server whose imports started one would hand its children
    locks that no one releases, so it stops before serving, and the worker starts the ordinary way."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent("""
        import threading, time
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    """))
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with pytest.raises(forkserver.ForkServerError, match="threads after its imports"):
        forkserver.ForkServer(env, "candidate").wait_ready()


def test_servers_past_the_limit_are_closed_once_idle(monkeypatch):
    """One server per distinct environment: past MAX_SERVERS the oldest idle one goes (each holds torch's
    memory), never one with a worker alive."""
    monkeypatch.setattr(forkserver, "_servers", {})
    monkeypatch.setattr(forkserver, "MAX_SERVERS", 1)
    with Worker("cpu", label="candidate", extra_env={"KF_TEST_SERVER": "1"}) as first:
        assert first.run(NO_JOB, timeout_s=120).returncode == 0
    old = first.process.server
    with Worker("cpu", label="candidate", extra_env={"KF_TEST_SERVER": "2"}) as second:
        assert second.wait_ready(120)
        assert second.process.server is not old and list(forkserver._servers.values()) == [second.process.server]
        with Worker("cpu", label="candidate", extra_env={"KF_TEST_SERVER": "3"}) as third:
            assert third.wait_ready(120)
            assert second.process.server in forkserver._servers.values()  # its worker is alive: kept
        assert old.process.poll() is not None  # the idle one was closed
    forkserver.close_all()
