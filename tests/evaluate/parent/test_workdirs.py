"""Working folders: the reaper removes exactly the folders no live process holds."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from kfoundry.evaluate.parent import workdirs
from kfoundry.evaluate.parent.workdirs import LOCK_NAME, WorkDir, reap, work_roots

# Children load the module from its file: importing the `kfoundry.evaluate` package loads torch.
_LOAD = textwrap.dedent(
    f"""
    import importlib.util, sys, time
    spec = importlib.util.spec_from_file_location("workdirs", {workdirs.__file__!r})
    workdirs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(workdirs)
    """
)


def _owner(root: Path) -> tuple[subprocess.Popen, Path]:
    """A child that makes a WorkDir under root, says where, and sleeps."""
    code = _LOAD + textwrap.dedent(
        f"""
        wd = workdirs.WorkDir.create("test", {str(root)!r})
        print(wd.path, flush=True)
        time.sleep(60)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    path = Path(child.stdout.readline().strip())
    assert path.is_dir() and (path / LOCK_NAME).is_file()
    return child, path


def _end(child: subprocess.Popen) -> None:
    child.kill()
    child.wait(timeout=10)
    if child.stdout:
        child.stdout.close()


def test_folder_of_a_killed_owner_is_reaped(tmp_path):
    child, path = _owner(tmp_path)
    try:
        assert reap([str(tmp_path)]) == []
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        assert reap([str(tmp_path)]) == [path]
        assert not path.exists()
    finally:
        _end(child)


def test_folder_of_a_live_owner_is_kept(tmp_path):
    child, path = _owner(tmp_path)
    try:
        assert reap([str(tmp_path)]) == []
        assert path.is_dir()
        assert child.poll() is None
    finally:
        _end(child)
    assert reap([str(tmp_path)]) == [path]


def test_a_child_holding_the_inherited_lock_keeps_the_folder(tmp_path):
    wd = WorkDir.create("inherit", str(tmp_path))
    assert os.get_inheritable(wd.lock_fd) is False
    holder = subprocess.Popen(["sleep", "60"], pass_fds=[wd.lock_fd])
    try:
        os.close(wd.lock_fd)  # the creator lets go; the child's copy of the fd still holds it
        assert reap([str(tmp_path)]) == []
        assert wd.path.is_dir()
        holder.kill()
        holder.wait(timeout=10)
        assert reap([str(tmp_path)]) == [wd.path]
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_a_child_not_given_the_fd_does_not_hold_the_lock(tmp_path):
    wd = WorkDir.create("noinherit", str(tmp_path))
    other = subprocess.Popen(["sleep", "60"], close_fds=False)
    try:
        os.close(wd.lock_fd)
        assert reap([str(tmp_path)]) == [wd.path]
    finally:
        other.kill()
        other.wait(timeout=10)


def test_lockless_folders_are_reaped_only_when_old(tmp_path):
    old = tmp_path / "kfoundry-old-abc"
    fresh = tmp_path / "kfoundry-fresh-abc"
    for folder in (old, fresh):
        folder.mkdir()
        (folder / "data.bin").write_bytes(b"x" * 1000)
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    assert reap([str(tmp_path)]) == [old]
    assert not old.exists() and fresh.is_dir()


def test_other_names_files_and_symlinks_are_left_alone(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "kfoundry-outside-abc"  # orphaned, but only reachable through a symlink
    outside.mkdir()
    (outside / LOCK_NAME).touch()
    (root / "kfoundry-link").symlink_to(outside)
    (root / "kfoundry-file").write_text("not a folder")
    stranger = root / "other-thing"
    stranger.mkdir()
    (stranger / LOCK_NAME).touch()
    long_ago = time.time() - 7200
    os.utime(stranger, (long_ago, long_ago))
    assert reap([str(root)]) == []
    assert outside.is_dir() and (root / "kfoundry-link").is_symlink()
    assert (root / "kfoundry-file").is_file() and stranger.is_dir()


def test_reap_skips_roots_that_do_not_exist(tmp_path):
    assert reap([str(tmp_path / "missing")]) == []


def test_remove_is_idempotent_and_the_context_manager_removes(tmp_path):
    with WorkDir.create("ctx", str(tmp_path)) as wd:
        assert wd.path.name.startswith("kfoundry-ctx-") and wd.path.parent == tmp_path
        assert not (wd.path / (LOCK_NAME + ".new")).exists()
    assert not wd.path.exists()
    wd.remove()
    try:
        os.fstat(wd.lock_fd)
        closed = False
    except OSError:
        closed = True
    assert closed


def test_work_roots_are_distinct_and_include_the_chosen_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KFOUNDRY_WORK_DIR", str(tmp_path))
    roots = work_roots()
    assert roots[0] == str(tmp_path)
    assert len({os.path.realpath(r) for r in roots}) == len(roots)
    assert all(os.path.isdir(r) for r in roots)
    monkeypatch.setenv("KFOUNDRY_WORK_DIR", str(tmp_path / "missing"))
    assert str(tmp_path / "missing") not in work_roots()
