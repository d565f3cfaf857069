"""Turning a candidate's exception into a verdict and an error record a person can act on."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from kfoundry.diagnose.cuda_errors import build_error_details, parse_build_log, undefined_symbol
from kfoundry.diagnose.triton_errors import exception_chain, triton_error_details
from kfoundry.evaluate.shared.protocol import STDERR

COMPILE_ERROR_TYPES = ("CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct",
                       "InterpreterError", "OutOfResources", "PTXASError")


_chain = exception_chain


def candidate_frames(exc: BaseException, candidate_path: str) -> list[dict[str, Any]]:
    """The frames in the candidate's file across the exception chain, outermost first."""
    found = []
    for link in reversed(_chain(exc)):  # the outermost exception's frames lead to the inner ones
        for frame in traceback.extract_tb(link.__traceback__):
            if frame.filename == candidate_path:
                item = {"file": frame.filename, "line": frame.lineno, "function": frame.name,
                        "text": (frame.line or "").strip()}
                if item not in found:
                    found.append(item)
    return found


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


def _read_source(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _build_log(exc: BaseException) -> str:
    """The extension build's log: in the exception (verbose=False), else in the worker's own
    output (verbose=True sends ninja's output there; the worker runs in its work directory)."""
    text = "\n".join(str(link) for link in _chain(exc) if "Error building extension" in str(link))
    if parse_build_log(text):
        return text
    try:
        return text + "\n" + (Path.cwd() / STDERR).read_text(errors="replace")[-20000:]
    except OSError:
        return text


def kernel_details(exc: BaseException, candidate_path: str) -> dict[str, Any]:
    """error["triton"] (a Triton kernel error, located) and error["nvcc"] (an extension build's
    first error, located in the candidate's source string), where they apply."""
    details: dict[str, Any] = {}
    triton = triton_error_details(exc, candidate_path)
    if triton:
        details["triton"] = triton
    if any(type(link).__name__ == "RuntimeError" and "Error building extension" in str(link) for link in _chain(exc)):
        nvcc = build_error_details(_build_log(exc), _read_source(candidate_path), candidate_path)
        if nvcc:
            details["nvcc"] = nvcc
    elif isinstance(exc, ImportError) and "undefined symbol" in str(exc):
        nvcc = undefined_symbol(str(exc), _read_source(candidate_path), candidate_path)
        if nvcc:
            details["nvcc"] = nvcc
    return details


def describe_exception(exc: BaseException, candidate_path: str, phase: str) -> dict[str, Any]:
    """A verdict (compile_error or runtime_error), a message and the error's details."""
    frame = candidate_frame(exc, candidate_path)
    frames = candidate_frames(exc, candidate_path)
    compile_error = is_compile_error(exc) or (phase == "load" and isinstance(exc, (ImportError, NameError)))
    status = "compile_error" if compile_error else "runtime_error"
    what = {"load": "loading the candidate", "init": "constructing ModelNew",
            "compile": "running forward the first time (where kernels compile)", "correctness": "running forward",
            "timing": "running forward for timing"}.get(phase, phase)
    kind = "kernel compilation failed" if compile_error and phase != "load" else f"{type(exc).__name__} while {what}"
    details = kernel_details(exc, candidate_path)
    triton, nvcc = details.get("triton"), details.get("nvcc")
    body = _short(exc)
    # the essential line, not Triton's source dump, the interpreter's pointer arrays or ninja's commands
    if nvcc:
        extension = nvcc.get("extension")
        body = (f"Error building extension '{extension}': " if extension else "") + \
            f"{nvcc.get('compiler')} error: {nvcc.get('message')}"
    elif triton and triton.get("message"):
        body = f"{triton.get('exception') or type(exc).__name__}: {triton['message']}"
    # a compiled kernel's error (GPU) or a build error names a line inside the kernel or the source
    # string; the Python frame is only the launch or the load_inline call: point at the former
    located = nvcc or (triton if triton and triton.get("mode") == "compiler" else None)
    if located and located.get("file") == candidate_path and located.get("line"):
        frame = {"file": candidate_path, "line": located["line"], "function": located.get("kernel")
                 or located.get("function") or (frame or {}).get("function"), "text": located.get("text", "")}
    where = f" at {frame['file']}:{frame['line']} ({frame['text']})" if frame else ""
    message = f"{kind}{where}: {body}"
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
            "message": body if triton else _short(exc),
            "phase": phase,
            **({"file": frame["file"], "line": frame["line"], "text": frame["text"],
                "function": frame["function"]} if frame else {}),
            **({"frames": frames[-8:]} if frames else {}),
            **details,
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
