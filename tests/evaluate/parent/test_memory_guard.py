"""Memory guard: real workers over their budget are ended (by the watchdog or by the kernel through a
cgroup), workers under it are not, and nothing of the guard outlives close()."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from kfoundry.evaluate.parent import host_memory
from kfoundry.evaluate.parent.memory_guard import FORCE_ENV, MemoryGuard, reap_cgroups

MB = 1 << 20
LIMIT = 300 * 10**6  # decimal, so describe() reads "300.0 MB"

# Allocates 50 MB every 0.05 s up to 1 GB; says so if it gets there.
ALLOCATE = """
import time
blocks = []
for _ in range(20):
    blocks.append(b"\\x01" * (50 << 20))
    time.sleep(0.05)
print("survived", flush=True)
"""

# Writes a 400 MB file, 20 MB at a time, into the folder given as argv[1].
WRITE_FILE = """
import os, sys, time
chunk = b"\\x01" * (20 << 20)
with open(os.path.join(sys.argv[1], "big.bin"), "wb") as file:
    for _ in range(20):
        file.write(chunk)
        file.flush()
        time.sleep(0.02)
print("survived", flush=True)
"""

# The allocating worker, one level down: the guard must count and end the whole tree.
ALLOCATE_IN_GRANDCHILD = f"""
import subprocess, sys
sys.exit(subprocess.call([sys.executable, "-c", {ALLOCATE!r}]))
"""

MODEST = """
import os, sys
block = b"\\x01" * (50 << 20)
with open(os.path.join(sys.argv[1], "small.bin"), "wb") as file:
    file.write(b"\\x01" * (20 << 20))
print("survived", flush=True)
"""


def _run(guard: MemoryGuard, code: str, *args: str) -> subprocess.CompletedProcess:
    """Run a worker under the guard the way kfoundry's worker pool does."""
    command = guard.command_prefix() + [sys.executable, "-c", textwrap.dedent(code), *args]
    worker = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    guard.attach(worker.pid)
    try:
        out, _ = worker.communicate(timeout=30)
    finally:
        worker.kill()
        worker.wait()
    return subprocess.CompletedProcess(command, worker.returncode, out, "")


@pytest.fixture
def watchdog(monkeypatch, tmp_path):
    monkeypatch.setenv(FORCE_ENV, "watchdog")
    guard = MemoryGuard.create(LIMIT, tmp_path, "test")
    yield guard
    guard.close()


@pytest.fixture
def shm_folder():
    root = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    folder = Path(tempfile.mkdtemp(prefix="kfoundry-test-guard-", dir=root))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_watchdog_is_forced_and_described(watchdog):
    assert watchdog.kind == "watchdog" and watchdog.cgroup is None
    assert watchdog.command_prefix() == []
    assert watchdog.describe() == f"watchdog (RSS + folder), 300.0 MB: {FORCE_ENV}=watchdog"


def test_watchdog_ends_a_worker_that_allocates_past_its_limit(watchdog):
    result = _run(watchdog, ALLOCATE)
    assert result.returncode == -signal.SIGKILL and "survived" not in result.stdout
    seen = watchdog.exceeded()
    assert seen is not None and LIMIT <= seen <= LIMIT + 200 * MB, seen / MB


def test_watchdog_ends_the_whole_process_tree(watchdog):
    result = _run(watchdog, ALLOCATE_IN_GRANDCHILD)
    assert result.returncode == -signal.SIGKILL
    assert watchdog.exceeded() is not None
    assert host_memory.process_tree(watchdog.pid) == [watchdog.pid]  # no grandchild left running


@pytest.mark.parametrize("where", ["disk", "tmpfs"])
def test_watchdog_counts_files_in_the_guarded_folder(monkeypatch, tmp_path, shm_folder, where):
    monkeypatch.setenv(FORCE_ENV, "watchdog")
    folder = tmp_path if where == "disk" else shm_folder
    with MemoryGuard.create(LIMIT, folder, "files") as guard:
        result = _run(guard, WRITE_FILE, str(folder))
        assert result.returncode == -signal.SIGKILL and "survived" not in result.stdout
        seen = guard.exceeded()
        assert seen is not None and seen >= LIMIT
    assert (folder / "big.bin").stat().st_size < 400 * MB


def test_watchdog_leaves_a_worker_under_its_limit_alone(watchdog, tmp_path):
    result = _run(watchdog, MODEST, str(tmp_path))
    assert result.returncode == 0 and "survived" in result.stdout
    assert watchdog.exceeded() is None
    watchdog.close()
    watchdog.close()  # idempotent
    assert watchdog._thread is not None and not watchdog._thread.is_alive()


@pytest.fixture
def cgroup_guard(monkeypatch, tmp_path):
    monkeypatch.delenv(FORCE_ENV, raising=False)
    guard = MemoryGuard.create(LIMIT, tmp_path, "cgroup")
    if guard.kind == "watchdog":
        guard.close()
        pytest.skip(f"no writable memory cgroup here: {guard.reason}")
    yield guard
    guard.close()


def test_cgroup_kernel_ends_a_worker_that_allocates_past_its_limit(cgroup_guard):
    folder = cgroup_guard.cgroup
    assert folder.is_dir() and folder.name.startswith(f"kfoundry-{os.getuid()}-{os.getpid()}-")
    assert cgroup_guard.describe() == f"{cgroup_guard.kind}, 300.0 MB"
    result = _run(cgroup_guard, ALLOCATE)
    assert result.returncode == -signal.SIGKILL and "survived" not in result.stdout
    seen = cgroup_guard.exceeded()
    assert seen is not None and seen >= 0.9 * LIMIT, seen
    cgroup_guard.close()
    assert not folder.exists()


def test_cgroup_worker_sees_its_limit_and_is_not_ended_under_it(cgroup_guard, tmp_path):
    probe = f"""
    import importlib.util
    spec = importlib.util.spec_from_file_location("host_memory", {host_memory.__file__!r})
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    available, source = module.host_available()
    print(available, source, flush=True)
    print(open("/proc/self/cgroup").read(), flush=True)
    """
    result = _run(cgroup_guard, probe)
    assert result.returncode == 0
    available, source = result.stdout.splitlines()[0].split(" ", 1)
    assert cgroup_guard.cgroup.name in result.stdout.split("\n", 1)[1]  # it ran inside the cgroup
    assert source.startswith(cgroup_guard.kind) and cgroup_guard.cgroup.name in source
    assert 0 < int(available) <= LIMIT
    assert _run(cgroup_guard, MODEST, str(tmp_path)).returncode == 0
    assert cgroup_guard.exceeded() is None


def test_cgroup_close_kills_what_is_left_and_removes_it(cgroup_guard):
    command = cgroup_guard.command_prefix() + ["sleep", "60"]
    worker = subprocess.Popen(command, start_new_session=True)
    cgroup_guard.attach(worker.pid)
    procs = cgroup_guard.cgroup / "cgroup.procs"
    for _ in range(100):  # the shell writes its pid before it execs
        if procs.read_text().split():
            break
        subprocess.run(["sleep", "0.02"])
    assert str(worker.pid) in procs.read_text().split()
    folder = cgroup_guard.cgroup
    cgroup_guard.close()
    assert worker.wait(timeout=10) == -signal.SIGKILL
    assert not folder.exists()


def test_reap_cgroups_removes_only_those_of_dead_creators(cgroup_guard):
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = cgroup_guard.cgroup.parent / f"kfoundry-{os.getuid()}-{dead.pid}-0"
    orphan.mkdir()
    try:
        assert reap_cgroups() >= 1
        assert not orphan.exists()
        assert cgroup_guard.cgroup.is_dir()  # ours: its creator (this process) lives
    finally:
        if orphan.exists():
            orphan.rmdir()
