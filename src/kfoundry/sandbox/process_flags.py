"""Process flags through prctl: not dumpable, so that other processes of the same user (without
CAP_SYS_PTRACE) can neither ptrace-attach nor read /proc/<pid>/environ or /proc/<pid>/mem."""

from __future__ import annotations

import ctypes

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, arg: int = 0) -> int:
    ulong = ctypes.c_ulong
    return _libc.prctl(ctypes.c_int(option), ulong(arg), ulong(0), ulong(0), ulong(0))


def make_non_dumpable() -> bool:
    """Clear this process's dumpable flag (also: no core dumps). True on success. Forked children
    keep it; an execve of an ordinary binary sets it back to dumpable, so apply it in the process
    that runs the untrusted code."""
    return _prctl(_PR_SET_DUMPABLE, 0) == 0


def is_dumpable() -> bool | None:
    """True when dumpable by its owner (1); False when not (0, or 2: by root only); None when
    prctl fails."""
    value = _prctl(_PR_GET_DUMPABLE)
    return None if value < 0 else value == 1
