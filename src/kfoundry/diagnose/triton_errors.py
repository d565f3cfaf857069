"""A Triton kernel error, mapped to the offending line of the candidate's file (runs in the worker,
where the exception and its frames are alive).

Two shapes reach us:

- Compiled (a GPU): `triton.compiler.errors.CompilationError` carries the kernel's source from its
  `def` line on (`src`) and the AST node that failed, whose `lineno` counts from that `def` (1 =
  the def line). A call into a @triton.jit helper that fails is wrapped: the outer error points at
  the call, its `__cause__` at the helper's line. The file line is the def's file line + lineno - 1;
  the code generator that raised knows the def's line (`CodeGenerator.begin_line`, stored as the
  def's line - 1), else the def is found by name in the candidate's source.
- Interpreted (TRITON_INTERPRET=1): `triton.runtime.errors.InterpreterError(repr(inner)) from inner`;
  the interpreter runs the kernel from the candidate's file with its true line numbers, so the
  deepest frame in that file is the line.
"""

from __future__ import annotations

import ast
import re
import traceback
from pathlib import Path
from typing import Any

from kfoundry import source_ast

WRAPPERS = ("InterpreterError",)
_REPR = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Failure))\((?P<quote>['\"])(?P<text>.*)(?P=quote)\)$",
                   re.DOTALL)
_NUMBERS = re.compile(r"\[[\d\s.,eE+-]{60,}\]")


def exception_chain(exc: BaseException | None) -> list[BaseException]:
    """exc, its cause (or context), and so on: outermost first."""
    seen, out = set(), []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def is_compilation_error(exc: BaseException) -> bool:
    return all(hasattr(exc, attr) for attr in ("src", "node", "error_message"))


def essential_message(text: str) -> str:
    """`ValueError("arange's ...")` -> `arange's ...`; long runs of numbers (the interpreter prints
    pointer arrays) shortened."""
    text = (text or "").strip()
    for _ in range(3):  # InterpreterError('ValueError("...")') nests reprs
        found = _REPR.match(text)
        if not found:
            break
        text = found.group("text").replace("\\n", "\n").replace("\\'", "'").replace('\\"', '"')
    return _NUMBERS.sub("[...]", text)


def _def_line(source_lines: list[str], name: str) -> int | None:
    try:
        tree = source_ast.parse("\n".join(source_lines))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node.lineno
    return None


def _generator_of(exc: BaseException) -> Any:
    """The Triton CodeGenerator whose frame raised `exc` (the innermost frame holding one)."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if owner is not None and hasattr(owner, "jit_fn") and hasattr(owner, "begin_line"):
            found = owner
        tb = tb.tb_next
    return found


def _read_lines(path: str | None, cache: dict[str, list[str]]) -> list[str]:
    if not path:
        return []
    if path not in cache:
        try:
            cache[path] = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            cache[path] = []
    return cache[path]


def _locate_compilation_error(exc: BaseException, candidate_path: str,
                              cache: dict[str, list[str]]) -> dict[str, Any]:
    node = exc.node
    relative = getattr(node, "lineno", None)
    src = exc.src or ""
    found = re.search(r"^\s*def\s+(\w+)", src, re.MULTILINE)
    kernel = found.group(1) if found else None
    place: dict[str, Any] = {"kernel": kernel, "kernel_line": relative}
    generator = _generator_of(exc)
    path, def_line = None, None
    if generator is not None and getattr(generator.jit_fn, "src", None) == src:
        path = getattr(generator, "file_name", None)
        def_line = generator.begin_line + 1
    if def_line is None and kernel:
        path = candidate_path
        def_line = _def_line(_read_lines(candidate_path, cache), kernel)
    if def_line is None or relative is None:
        return place
    lines = _read_lines(path, cache)
    line = def_line + relative - 1
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    indent = len(lines[def_line - 1]) - len(lines[def_line - 1].lstrip()) if 0 < def_line <= len(lines) else 0
    place.update(file=path, line=line, text=text.strip(),
                 column=getattr(node, "col_offset", 0) + indent + 1)
    return place


def _compiled(chain: list[BaseException], candidate_path: str) -> dict[str, Any] | None:
    errors = [link for link in chain if is_compilation_error(link)]
    if not errors:
        return None
    cache: dict[str, list[str]] = {}
    places = [_locate_compilation_error(e, candidate_path, cache) for e in errors]
    innermost = errors[-1]
    message = innermost.error_message
    underneath = innermost.__cause__ or innermost.__context__
    if not message and underneath is not None:
        message = str(underneath)
    inner_type = type(underneath).__name__ if underneath is not None and not is_compilation_error(underneath) else None
    if message and inner_type is None:
        found = _REPR.match(message.strip())
        inner_type = found.group("type") if found else None
    details = {"mode": "compiler", "type": type(innermost).__name__, "exception": inner_type,
               "message": essential_message(message or str(innermost))}
    details.update({k: v for k, v in places[-1].items() if v is not None})
    details["calls"] = [p for p in places[:-1] if p.get("line")]  # the call sites that led there, outermost first
    launch = [f for link in chain for f in _frames_in(link, candidate_path)]
    if launch:
        details["launch"] = _frame(launch[-1])
    return details


def _frames_in(link: BaseException, path: str) -> list[traceback.FrameSummary]:
    return [frame for frame in traceback.extract_tb(link.__traceback__) if frame.filename == path]


def _interpreted(chain: list[BaseException], candidate_path: str) -> dict[str, Any] | None:
    wrapped = [i for i, link in enumerate(chain) if type(link).__name__ in WRAPPERS]
    if not wrapped:
        return None
    inner = next((link for link in reversed(chain) if type(link).__name__ not in WRAPPERS), chain[-1])
    # the outer links hold the launch (forward's frames); the ones the wrapper was raised from hold
    # the kernel's frames, a helper's after its caller's
    launch = [f for link in chain[:wrapped[0] + 1] for f in _frames_in(link, candidate_path)]
    kernel_frames = [f for link in chain[wrapped[0] + 1:] for f in _frames_in(link, candidate_path)]
    details: dict[str, Any] = {"mode": "interpreter", "type": type(chain[wrapped[0]]).__name__,
                               "exception": type(inner).__name__, "message": essential_message(str(inner))}
    if kernel_frames:
        last = kernel_frames[-1]
        details.update(kernel=last.name, file=last.filename, line=last.lineno, text=(last.line or "").strip())
        if getattr(last, "colno", None) is not None:
            details["column"] = last.colno + 1
        details["calls"] = [_frame(f) for f in kernel_frames[:-1]]
    if launch:
        details["launch"] = _frame(launch[-1])
    return details


def _frame(frame: traceback.FrameSummary) -> dict[str, Any]:
    return {"kernel": frame.name, "file": frame.filename, "line": frame.lineno, "text": (frame.line or "").strip()}


def triton_error_details(exc: BaseException, candidate_path: str) -> dict[str, Any] | None:
    """What a Triton kernel error says, located: {mode ("compiler" or "interpreter"), type,
    exception (the underlying error's type), message (the essential line), kernel, file, line,
    column (compiler), text, calls (the call sites that led there)}; None if no Triton error."""
    chain = exception_chain(exc)
    try:
        return _compiled(chain, candidate_path) or _interpreted(chain, candidate_path)
    except Exception:  # a diagnosis aid: it must never hide the error it describes
        return None
