"""A run's log and how its progress is reported (the run config's `log` section, kfoundry.run_config).

--log-file PATH appends a full log of the run to PATH through Python's logging: a header with the
command line and the settings in force with their sources, every progress message and phase line,
the LLM calls' retries and warnings, and the outcome, each line timestamped; --log-level chooses
how much (debug adds the whole result records). Without --log-file nothing is written and the level
is unused. `heartbeat_s` is how often a run whose output is not a terminal says it is still working.

Progress goes to the logger "kfoundry.progress" (`progress(message)`); whatever a handler writes is
scrubbed of every known secret first."""

from __future__ import annotations

import json
import logging
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kfoundry.errors import UsageError

LEVELS = ("debug", "info", "warning", "error")
ROOT = "kfoundry"  # every module's logger is a child of it
FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
DEFAULT_HEARTBEAT_S = 30.0

progress_log = logging.getLogger(f"{ROOT}.progress")
_heartbeat_s = DEFAULT_HEARTBEAT_S  # the run's, while run_log() holds it: the progress displays read it


@dataclass
class LogSettings:
    log_file: str | None = None
    log_level: str = "info"
    heartbeat_s: float = DEFAULT_HEARTBEAT_S  # 0: no heartbeat

    def validate(self) -> None:
        if self.log_level.lower() not in LEVELS:
            raise UsageError(f"unknown --log-level {self.log_level!r}: use one of {', '.join(LEVELS)}")
        if self.heartbeat_s < 0:
            raise UsageError("heartbeat must be 0 (none) or a positive number of seconds")


def progress(message: str) -> None:
    """One progress message or phase line, into the run's log (a no-op without one)."""
    progress_log.info(message)


def tee(show: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """A progress callback that puts each message into the run's log, then hands it to `show`."""
    def both(message: str) -> None:
        progress(message)
        if show is not None:
            show(message)

    return both


def outcome(summary: str, record: Any = None) -> None:
    """A run's result: its summary line, and at debug level its whole record as JSON."""
    log = logging.getLogger(ROOT)
    log.info("result: %s", summary)
    if record is not None and log.isEnabledFor(logging.DEBUG):
        log.debug("result record: %s", json.dumps(record, default=str))


def heartbeat_s() -> float:
    """Seconds of silence after which a display that is not a terminal prints a heartbeat line."""
    return _heartbeat_s


class _Scrubbed(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        from kfoundry.sandbox.secrets import scrub

        return scrub(super().format(record))


@contextmanager
def run_log(settings: LogSettings, header: list[str] | None = None) -> Iterator[logging.Logger]:
    """While it is held: the run's heartbeat in force and, with `settings.log_file`, every record of
    the "kfoundry" loggers at `settings.log_level` or above appended to that file, after the lines of
    `header` and a first line with the command line."""
    global _heartbeat_s
    logger = logging.getLogger(ROOT)
    handler = None
    if settings.log_file:
        path = Path(settings.log_file).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(path, mode="a", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--log-file {path}: cannot write it ({exc.strerror or exc})") from None
        handler.setFormatter(_Scrubbed(FORMAT, DATE_FORMAT))
        handler.setLevel(settings.log_level.upper())
    saved_level, saved_heartbeat = logger.level, _heartbeat_s
    _heartbeat_s = settings.heartbeat_s
    if handler is not None:
        logger.addHandler(handler)
        if logger.getEffectiveLevel() > handler.level:
            logger.setLevel(handler.level)
        logger.info("command: %s", shlex.join(["kfoundry", *sys.argv[1:]]))
        for line in header or []:
            logger.info("%s", line)
    try:
        yield logger
    except BaseException as exc:
        if handler is not None and not _is_exit(exc):
            logger.error("ended by %s: %s", type(exc).__name__, exc)
        raise
    finally:
        _heartbeat_s = saved_heartbeat
        if handler is not None:
            logger.removeHandler(handler)
            logger.setLevel(saved_level)
            handler.close()


def _is_exit(exc: BaseException) -> bool:
    """A command's normal end (typer.Exit is click's Exit, not a SystemExit)."""
    return isinstance(exc, SystemExit) or type(exc).__name__ == "Exit"


def setting_lines(provenance: list[tuple[str, Any, str]]) -> list[str]:
    """The header lines of a log: each setting that is not its default, with where it came from."""
    return [f"setting {name} = {value!r} ({source})" for name, value, source in provenance]
