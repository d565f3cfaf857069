"""Turning a candidate's exception into a verdict and an error record a person can act on."""

from __future__ import annotations

import traceback
from typing import Any

COMPILE_ERROR_TYPES = ("CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct",
                       "InterpreterError", "OutOfResources")


def _chain(exc: BaseException) -> list[BaseException]:
    seen, out = set(), []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def candidate_frame(exc: BaseException, candidate_path: str) -> dict[str, Any] | None:
    """The deepest frame in the candidate's file across the exception chain."""
    found = None
    for link in _chain(exc):
        for frame in traceback.extract_tb(link.__traceback__):
            if frame.filename == candidate_path:
                found = {"file": frame.filename, "line": frame.lineno, "function": frame.name,
                         "text": (frame.line or "").strip()}
    return found


def is_compile_error(exc: BaseException) -> bool:
    for link in _chain(exc):
        name = type(link).__name__
        if name in COMPILE_ERROR_TYPES:
            return True
        if name == "RuntimeError" and "Error building extension" in str(link):
            return True
    return False


def _short(exc: BaseException, limit: int = 2000) -> str:
    text = str(exc).strip()
    if type(exc).__name__ == "InterpreterError" and (exc.__cause__ or exc.__context__) is not None:
        inner = exc.__cause__ or exc.__context__
        text = f"{type(inner).__name__}: {inner}"
    return text if len(text) <= limit else text[:limit] + " ..."


def describe_exception(exc: BaseException, candidate_path: str, phase: str) -> dict[str, Any]:
    """A verdict (compile_error or runtime_error), a message and the error's details."""
    frame = candidate_frame(exc, candidate_path)
    compile_error = is_compile_error(exc) or (phase == "load" and isinstance(exc, (ImportError, NameError)))
    status = "compile_error" if compile_error else "runtime_error"
    what = {"load": "loading the candidate", "init": "constructing ModelNew",
            "compile": "running forward the first time (where kernels compile)", "correctness": "running forward",
            "timing": "running forward for timing"}.get(phase, phase)
    kind = "kernel compilation failed" if compile_error and phase != "load" else f"{type(exc).__name__} while {what}"
    where = f" at {frame['file']}:{frame['line']} ({frame['text']})" if frame else ""
    message = f"{kind}{where}: {_short(exc)}"
    lowered = str(exc).lower()
    if isinstance(exc, MemoryError) or any(
        phrase in lowered for phrase in ("out of memory", "can't allocate memory", "cannot allocate memory")
    ):
        message += " [out of memory]"
    elif "illegal memory access" in lowered or "misaligned address" in lowered:
        message += " [CUDA memory fault: check the masks of loads and stores]"
    return {
        "status": status,
        "message": message,
        "error": {
            "type": type(exc).__name__,
            "message": _short(exc),
            "phase": phase,
            **({"file": frame["file"], "line": frame["line"], "text": frame["text"]} if frame else {}),
            "traceback": "".join(traceback.format_exception(exc))[-6000:],
        },
    }


def describe_syntax_error(exc: SyntaxError) -> dict[str, Any]:
    line = (exc.text or "").rstrip("\n")
    caret = " " * max((exc.offset or 1) - 1 - (len(line) - len(line.lstrip())), 0) + "^"
    return {
        "status": "compile_error",
        "message": f"syntax error at {exc.filename}:{exc.lineno}: {exc.msg}\n    {line.strip()}\n    {caret}",
        "error": {"type": "SyntaxError", "message": exc.msg, "phase": "load", "file": exc.filename,
                  "line": exc.lineno, "column": exc.offset, "text": line.strip()},
    }
