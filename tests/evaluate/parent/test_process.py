"""kfoundry.evaluate.parent.process: scrubbed environments, private directories, timeouts that kill. Workers run under a `sh` wrapper here where the test is about the process, not
about Python (no torch import: fast)."""

import json
import os
import signal
import sys
import time

from kfoundry import paths
from kfoundry.evaluate.parent.process import Worker, problem_environment, work_root
from kfoundry.sandbox.environment import IMPORT_PATH_ENV, SYS_PATH_ENV
from kfoundry.sandbox.policy import PRIVATE_ENV

GIB = 1 << 30


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _shell_worker(script: str, **options) -> Worker:
    """A Worker whose process is `sh -c script` (the wrapper runs instead of the Python worker)."""
    return Worker("cpu", wrapper=["sh", "-c", script, "sh"], **options)


def test_worker_runs_in_a_private_directory_with_an_allowed_environment(monkeypatch):
    monkeypatch.setenv("KF_TEST_API_KEY", "sk-test")
    monkeypatch.setenv("KF_TEST_SESSION_TOKEN", "tok")
    monkeypatch.setenv("KF_TEST_VISIBLE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with _shell_worker("env > env.txt; pwd > cwd.txt") as worker:
        outcome = worker.run(ready_timeout_s=0, job={"kind": "candidate"}, timeout_s=30)
        env = dict(line.split("=", 1) for line in (worker.workdir / "env.txt").read_text().splitlines()
                   if "=" in line)
        cwd = (worker.workdir / "cwd.txt").read_text().strip()
        workdir = worker.workdir
    assert outcome.returncode == 0 and not outcome.timed_out
    assert outcome.result is None and outcome.phase == "start"  # sh never speaks the protocol
    assert "KF_TEST_API_KEY" not in env and "KF_TEST_SESSION_TOKEN" not in env
    assert "KF_TEST_VISIBLE" not in env and env["OMP_NUM_THREADS"] == "1"  # an allow-list, not a filter
    assert env["HOME"] == str(workdir) and env["KFOUNDRY_SANDBOX"] == "on"
    assert os.path.realpath(cwd) == os.path.realpath(workdir)
    assert env["TMPDIR"] == str(workdir / "tmp")
    assert env["TRITON_INTERPRET"] == "1"
    assert env["TRITON_CACHE_DIR"].startswith(str(workdir))
    assert env["KFOUNDRY_WORKER_DEVICE"] == "cpu"
    assert env["KFOUNDRY_WORKER_LABEL"] == "worker"
    assert "KFOUNDRY_GPU_LOCK" not in env  # CPU workers share no GPU
    assert not workdir.exists()  # closing removes the private directory


def test_timeout_kills_the_worker_and_its_children():
    with _shell_worker("sleep 120 & echo $! > child.pid; wait") as worker:
        started = time.monotonic()
        outcome = worker.run(ready_timeout_s=0, job={"kind": "candidate"}, timeout_s=1.5)
        elapsed = time.monotonic() - started
        child = int((worker.workdir / "child.pid").read_text())
        assert outcome.timed_out
        assert outcome.returncode == -signal.SIGKILL
        assert outcome.signal_name == "SIGKILL"
        assert 1.5 <= elapsed < 10
        assert worker.process.poll() is not None
        assert _wait_gone(child), "the worker's child survived the timeout"


def test_close_kills_what_the_worker_left_running():
    worker = _shell_worker("sleep 120 & echo $! > child.pid")  # sh exits at once, sleep stays behind
    child = None
    try:
        outcome = worker.run(ready_timeout_s=0, job={"kind": "candidate"}, timeout_s=30)
        assert outcome.returncode == 0 and not outcome.timed_out
        child = int((worker.workdir / "child.pid").read_text())
        worker.close()
        assert _wait_gone(child, seconds=2.0), "a background process of the worker outlived Worker.close()"
    finally:
        worker.close()
        if child is not None and _alive(child):
            os.kill(child, signal.SIGKILL)  # clean up the process this test caused


def test_a_worker_that_dies_before_its_job_is_reported():
    with _shell_worker("exit 7") as worker:
        time.sleep(0.2)  # let it die before the job is written (the pipe breaks: no exception)
        outcome = worker.run(ready_timeout_s=0, job={"kind": "candidate"}, timeout_s=30)
    assert outcome.returncode == 7
    assert not outcome.timed_out and outcome.result is None


def test_work_root_is_the_temp_dir_for_cpus_and_gpus(monkeypatch):
    # never /dev/shm, whatever the device: a CUDA worker's sandbox leaves it writable, so a folder there is
    # every candidate's
    monkeypatch.delenv("KFOUNDRY_WORK_DIR", raising=False)
    assert work_root() is None


def test_work_dir_setting_places_the_worker(monkeypatch, tmp_path):
    chosen = tmp_path / "work"
    monkeypatch.setenv("KFOUNDRY_WORK_DIR", str(chosen))
    assert work_root() == str(chosen) and chosen.is_dir()
    with Worker("cpu") as worker:
        assert worker.workdir.parent == chosen


def test_a_candidate_worker_reports_its_wait_and_exit_and_skips_the_teardown(tmp_path):
    # an atexit hook stands for the interpreter's teardown: a candidate worker leaves without running it.
    # The hook writes in the worker's own folder: a sandboxed worker can write nowhere else
    sitecustomize = tmp_path / "site"
    sitecustomize.mkdir()
    (sitecustomize / "sitecustomize.py").write_text(
        "import atexit, pathlib\natexit.register(lambda: pathlib.Path('teardown_ran').write_text('yes'))\n")
    for label, teardown in (("candidate", False), ("worker", True)):
        with Worker("cpu", label=label, extra_env={"PYTHONPATH": f"{sitecustomize}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}) as worker:
            outcome = worker.run(ready_timeout_s=0, job={"kind": "nothing"}, timeout_s=120)
            ran = (worker.workdir / "teardown_ran").exists()
        assert outcome.returncode == 0 and "internal_error" in outcome.result
        assert outcome.wait_s is not None and outcome.wait_s >= 0
        assert outcome.exit_s is not None and 0 <= outcome.exit_s < outcome.elapsed_s
        assert ran is teardown, label


def test_a_worker_is_told_the_parents_import_path_its_problems_folder_and_what_is_private(tmp_path, monkeypatch):
    """What the worker's start (kfoundry.sandbox.environment, kfoundry.sandbox.policy) reads: the entries this
    process added at run time, the problem's folder (for its own workers only) and the private paths."""
    added, project = tmp_path / "added", tmp_path / "project"
    added.mkdir()
    problem = project / "problem.py"
    project.mkdir()
    problem.write_text("x = 1\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(added)])
    cache = tmp_path / "evaluator-cache"
    script = "env > env.txt"
    with _shell_worker(script, extra_env=problem_environment(problem, [cache])) as worker:
        worker.run(ready_timeout_s=0, job={"kind": "candidate"}, timeout_s=30)
        env = dict(line.split("=", 1) for line in (worker.workdir / "env.txt").read_text().splitlines() if "=" in line)
    assert {"path": str(added), "site": False} in json.loads(env[SYS_PATH_ENV])
    assert json.loads(env[IMPORT_PATH_ENV]) == [str(project.resolve())]
    private = json.loads(env[PRIVATE_ENV])
    assert os.path.realpath(cache) in private and os.path.realpath(paths.cache_dir()) in private
    with _shell_worker(script) as worker:  # a worker of no problem: this process's own private paths still
        worker.run(ready_timeout_s=0, job={"kind": "candidate"}, timeout_s=30)
        env = dict(line.split("=", 1) for line in (worker.workdir / "env.txt").read_text().splitlines() if "=" in line)
    assert IMPORT_PATH_ENV not in env and os.path.realpath(paths.cache_dir()) in json.loads(env[PRIVATE_ENV])


def test_what_a_workers_sandbox_could_not_open_is_logged_once(caplog):
    from kfoundry.evaluate.parent import process

    note = f"/nowhere/{time.time()}: not readable by candidates, it lies in the private /nowhere"
    with caplog.at_level("WARNING", logger="kfoundry.sandbox"):
        for _ in range(3):
            process._note_unreadable({"unreadable": [note], "missing": []})
        process._note_unreadable({"unreadable": "not a list"})
        process._note_unreadable(None)
    assert [r.getMessage() for r in caplog.records] == [f"sandbox: {note}"]
