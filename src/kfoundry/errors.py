"""Errors a user can act on. The CLI prints their message and exits with code 2, no traceback."""

from __future__ import annotations


class KFoundryError(Exception):
    """Base class: bad input or bad usage, never a candidate's fault."""


class ProblemError(KFoundryError):
    """The problem file is missing, does not parse, lacks Model/get_inputs/get_init_inputs, or fails."""


class CandidateFileError(KFoundryError):
    """The candidate file given on the command line does not exist or cannot be read."""


class UsageError(KFoundryError):
    """An option has a value that cannot be used (bf16 on CPU, an unknown device, a bad --set)."""


class EnvironmentFault(KFoundryError):
    """Something outside the candidate's code fails (our own imports or an installed package's, CUDA's start,
    GPU memory held by another process): every evaluation would fail the same way, so the run stops at once
    and no candidate is charged with it. `cause` says what failed, `fix` what to do about it."""

    def __init__(self, cause: str, fix: str) -> None:
        super().__init__(cause, fix)  # both in args: the fault crosses processes (Ray) by pickle
        self.cause, self.fix = cause, fix

    def __str__(self) -> str:
        return f"environment fault: {self.cause}\nfix: {self.fix}"

    def to_dict(self) -> dict[str, str]:
        return {"status": "environment_error", "message": str(self), "cause": self.cause, "fix": self.fix}


def brief(exc: BaseException, limit: int = 160) -> str:
    """An exception's message on one short line (SQLite quotes whole damaged cells, newlines and all)."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
