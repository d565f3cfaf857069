"""Errors a user can act on. The CLI prints their message and exits with code 2, no traceback."""


class KFoundryError(Exception):
    """Base class: bad input or bad usage, never a candidate's fault."""


class ProblemError(KFoundryError):
    """The problem file is missing, does not parse, lacks Model/get_inputs/get_init_inputs, or fails."""


class CandidateFileError(KFoundryError):
    """The candidate file given on the command line does not exist or cannot be read."""


class UsageError(KFoundryError):
    """An option has a value that cannot be used (bf16 on CPU, an unknown device, a bad --set)."""


def brief(exc: BaseException, limit: int = 160) -> str:
    """An exception's message on one short line (SQLite quotes whole damaged cells, newlines and all)."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
