"""Small helpers shared by the tests."""

import difflib
import io
import os
import threading
from pathlib import Path

AFFINE_SEED = 1234  # the --seed of the shared affine evaluator (conftest.affine_evaluator)


def marker_line(path: Path, marker: str) -> int:
    """The 1-based line of `path` holding `marker` (fixtures mark their faulty line with a comment)."""
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if marker in line:
            return number
    raise AssertionError(f"{marker!r} not in {path}")


def alive(pid: int) -> bool:
    """Running: a killed process whose parent is gone stays a zombie until init reaps it (in a container
    init may never do so), and a zombie counts as dead."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE_GOLDEN_ENV = "KFOUNDRY_UPDATE_GOLDEN"


def assert_golden(path: Path, text: str) -> None:
    """`text` must equal the golden file `path` byte for byte. With KFOUNDRY_UPDATE_GOLDEN=1 the file is
    written instead: a change of behaviour then shows as a diff of the golden files in its commit."""
    if os.environ.get(UPDATE_GOLDEN_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    if not path.exists():
        raise AssertionError(f"no golden file {path}: run with {UPDATE_GOLDEN_ENV}=1 to write it")
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), "golden", "now", n=2))
        raise AssertionError(f"{path.name} changed (if that is meant, rerun with {UPDATE_GOLDEN_ENV}=1 and "
                             f"commit the golden files with the change):\n{diff[:6000]}")


def linked_unreadable_dependency(tmp_path: Path) -> Path:
    """A PYTHONPATH folder whose typing_extensions (which torch imports as it loads) is a link to a copy
    outside every folder a candidate's sandbox reads: the judge, unsandboxed, imports it; a candidate's
    worker that imports torch itself (as every worker does on a GPU) meets the report's
    `PermissionError: [Errno 13] Permission denied: '<that folder>/...'` before any of the candidate's code."""
    import typing_extensions

    hidden, entry = tmp_path / "hidden", tmp_path / "deps"
    hidden.mkdir()
    entry.mkdir()
    (hidden / "typing_extensions.py").write_text(Path(typing_extensions.__file__).read_text())
    (entry / "typing_extensions.py").symlink_to(hidden / "typing_extensions.py")
    return entry


WAIT_S = 60.0  # how long a test waits for a background thread before calling it stuck: a hang guard, no speed claim


class ManualClock:
    """A clock for code that takes `clock=`: it moves only when the test moves it (`clock.now += s`). Its
    reads from other threads than the test's are counted, so that a test waits until a background thread
    (a heartbeat) has looked at the new time (`wait_for_reads`) instead of sleeping and hoping it did."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.reads = 0  # by other threads
        self._test_thread = threading.current_thread()
        self._read = threading.Condition()

    def __call__(self) -> float:
        if threading.current_thread() is not self._test_thread:
            with self._read:
                self.reads += 1
                self._read.notify_all()
        return self.now  # read after counting: a read counted after a move sees the moved time

    def wait_for_reads(self, more: int = 1) -> None:
        """Until other threads have read the clock `more` times from now on."""
        with self._read:
            target = self.reads + more
            assert self._read.wait_for(lambda: self.reads >= target, timeout=WAIT_S), \
                "no background thread read the clock"


class Output(io.StringIO):
    """A text stream written from another thread, that a test waits on for what it expects to arrive."""

    def __init__(self) -> None:
        super().__init__()
        self._written = threading.Condition()

    def write(self, text: str) -> int:
        with self._written:
            count = super().write(text)
            self._written.notify_all()
        return count

    def wait_for(self, part: str, times: int = 1) -> str:
        """Until `part` has been written `times` times in all; returns what was written."""
        with self._written:
            assert self._written.wait_for(lambda: self.getvalue().count(part) >= times, timeout=WAIT_S), \
                f"{part!r} never written {times} time(s): {self.getvalue()!r}"
            return self.getvalue()
