"""Plain progress for logs: a line per phase change and a heartbeat during long silences.

A spinner or live panel shows nothing when output goes to a file or a pipe; this prints lines like
`[   12.3 s] reference: computing expected outputs` instead, so a log never stays silent for long."""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Self, TextIO


def is_terminal(stream: object) -> bool:
    """Whether `stream` is an interactive terminal (False for files, pipes and anything odd)."""
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except Exception:
        return False


class PhaseLog:
    """Prints a timestamped line when the phase changes, and every `heartbeat_s` seconds of silence a
    `still working: ...` line (the current phase, or `describe()`'s text). Thread-safe."""

    def __init__(self, stream: TextIO | None = None, heartbeat_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, describe: Callable[[], str] | None = None):
        self._stream = stream
        self.heartbeat_s = heartbeat_s
        self._clock = clock
        self._describe = describe
        self._lock = threading.Lock()
        self._t0 = clock()
        self._last_line = self._t0  # when the last line was printed (the start counts as one)
        self.current = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lines ----------------------------------------------------------------------------------------

    def phase(self, message: str) -> None:
        """Make `message` the current phase, with a line when it differs from the current one."""
        with self._lock:
            if message == self.current:
                return
            self.current = message
            self._write(message)

    def note(self, message: str) -> None:
        """A line that leaves the current phase as it is."""
        with self._lock:
            self._write(message)

    def _write(self, message: str) -> None:
        """One line, flushed at once; call with the lock held."""
        now = self._clock()
        self._last_line = now
        stream = self._stream if self._stream is not None else sys.stderr  # looked up late: pytest swaps it
        try:
            stream.write(f"[{now - self._t0:7.1f} s] {message}\n")
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or file must not break the work being logged
            pass

    # -- heartbeat ------------------------------------------------------------------------------------

    def start(self) -> Self:
        if self._thread is None and self.heartbeat_s > 0:  # 0 or less: lines only, no heartbeat
            self._stop.clear()
            self._thread = threading.Thread(target=self._beat, name="phase-log-heartbeat", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _beat(self) -> None:
        while True:
            with self._lock:
                wait = self._last_line + self.heartbeat_s - self._clock()
            if wait > 0:
                if self._stop.wait(wait):
                    return
                continue  # a line may have come meanwhile: measure the silence again
            text = self._what()  # outside the lock: describe() may be slow or take locks of its own
            with self._lock:
                if self._stop.is_set():
                    return
                if self._clock() - self._last_line >= self.heartbeat_s:  # no line came meanwhile
                    self._write(f"still working: {text}" if text else "still working")

    def _what(self) -> str:
        if self._describe is not None:
            try:
                return " ".join(self._describe().split())
            except Exception:  # a broken summary must not kill the heartbeat
                pass
        return self.current
