"""Private working folders for an evaluation that never leak.

Every folder kfoundry makes for an evaluation is named `kfoundry-<label>-<random>` under a root
(KFOUNDRY_WORK_DIR, /dev/shm or the system temp dir). A process killed with SIGKILL cannot clean
up, and on /dev/shm a leftover folder is memory lost until reboot. So each folder holds a lock file,
`.owner.lock`, flock'ed by its creator; the lock fd is handed to child processes (pass_fds), and
since an flock belongs to the open file description, the lock is held as long as the owner or any
child that inherited it lives. Once every holder is gone, anyone may take the lock: `reap` then
knows the folder is orphaned and removes it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from kfoundry.sandbox.policy import SHARED_MEMORY

PREFIX = "kfoundry-"
LOCK_NAME = ".owner.lock"
WORK_DIR_ENV = "KFOUNDRY_WORK_DIR"
# A folder without a lock is either from a version without locks or so fresh that its creator has
# not made the lock yet (mkdtemp, then open): only the first kind is old.
LOCKLESS_MAX_AGE_S = 3600.0


class WorkDir:
    """One locked working folder; `lock_fd` is the fd to pass to children (pass_fds=[lock_fd])."""

    def __init__(self, path: Path, lock_fd: int) -> None:
        self.path = path
        self.lock_fd = lock_fd
        self._removed = False

    @classmethod
    def create(cls, label: str, root: str | None) -> WorkDir:
        """Make `kfoundry-<label>-<random>` under `root` (None: the system temp dir), locked."""
        path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{label}-", dir=root))
        # Lock under a temporary name, then rename: the reaper never sees an unlocked lock file
        # (and a folder with no lock file yet is fresh, which it keeps).
        pending = path / (LOCK_NAME + ".new")
        try:
            fd = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            shutil.rmtree(path, ignore_errors=True)
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(pending, path / LOCK_NAME)
            # not inherited by accident (exec of unrelated children); pass_fds opts a child in
            os.set_inheritable(fd, False)
        except OSError:
            os.close(fd)
            shutil.rmtree(path, ignore_errors=True)
            raise
        return cls(path, fd)

    def remove(self) -> None:
        """Close the lock and delete the folder; safe to call again."""
        if self._removed:
            return
        self._removed = True
        try:
            os.close(self.lock_fd)
        except OSError:
            pass
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> WorkDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"WorkDir({str(self.path)!r}, lock_fd={self.lock_fd})"


def work_roots() -> list[str]:
    """The distinct existing roots kfoundry may have put folders under."""
    candidates: list[str] = []
    chosen = os.environ.get(WORK_DIR_ENV)
    if chosen:
        candidates.append(chosen)
    if os.path.isdir(SHARED_MEMORY) and os.access(SHARED_MEMORY, os.W_OK | os.X_OK):
        candidates.append(SHARED_MEMORY)
    candidates.append(tempfile.gettempdir())
    roots: list[str] = []
    seen: set[str] = set()
    for root in candidates:
        if not os.path.isdir(root):
            continue
        key = os.path.realpath(root)
        if key not in seen:
            seen.add(key)
            roots.append(root)
    return roots


def _orphaned(folder: str) -> bool:
    """True when no live process holds the folder's lock (or it is an old lockless leftover)."""
    lock = os.path.join(folder, LOCK_NAME)
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        try:
            age = time.time() - os.lstat(folder).st_mtime
        except OSError:
            return False
        return age > LOCKLESS_MAX_AGE_S
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its owner or a child is alive
    finally:
        os.close(fd)  # also drops our lock, if we took it
    return True


def reap(roots: Iterable[str | None] | None = None) -> list[Path]:
    """Remove orphaned `kfoundry-*` folders of ours under `roots` (default `work_roots()`).

    Never follows symlinks, never touches another user's folders and never raises: a folder that
    cannot be read or removed is left for a later run."""
    removed: list[Path] = []
    uid = os.getuid()
    for root in work_roots() if roots is None else roots:
        root = tempfile.gettempdir() if root is None else root
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for entry in entries:
            try:
                if not entry.name.startswith(PREFIX) or entry.is_symlink():
                    continue
                info = entry.stat(follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
                    continue
                if not _orphaned(entry.path):
                    continue
                shutil.rmtree(entry.path, ignore_errors=True)
                if not os.path.lexists(entry.path):
                    removed.append(Path(entry.path))
            except OSError:
                continue
    return removed
