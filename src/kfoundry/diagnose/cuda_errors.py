"""A failed CUDA / C++ extension build, mapped back into the candidate: the first error of the
nvcc / g++ log, located on the line of the candidate's file that holds it inside the source string
given to `torch.utils.cpp_extension.load_inline`.

What load_inline builds (torch/utils/cpp_extension.py, `load_inline`), in
`$TORCH_EXTENSIONS_DIR/<name>/`:

- `main.cpp` = "\\n".join(["#include <torch/extension.h>", *cpp_sources, <pybind11 bindings from
  `functions`>]): one line before the first source;
- `cuda.cu` = "\\n".join(["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>",
  *cuda_sources]): three lines before the first source;
- with `no_implicit_headers=True`, neither file gets its include lines.

Each source string takes its own newline count + 1 lines. The torch error is
`RuntimeError("Error building extension '<name>': " + ninja's output)`; ninja's output holds each
failed command and what the compiler said:

    /path/<name>/cuda.cu(7): error: identifier "shift_value" is undefined          (nvcc)
    /path/<name>/main.cpp:5:16: error: 'undefined_thing' was not declared in this scope   (g++)
    ptxas error   : Entry function '_Z3bigPf' uses too much shared data (0x40000 bytes, 0xc000 max)
"""

from __future__ import annotations

import ast
import re
from pathlib import PurePosixPath
from typing import Any

from kfoundry import source_ast

GENERATED = {"main.cpp": "cpp_sources", "cuda.cu": "cuda_sources", "sycl.sycl": "sycl_sources"}
IMPLICIT_LINES = {"main.cpp": 1, "cuda.cu": 3, "sycl.sycl": 2}

NVCC = re.compile(r"^(?P<file>\S.*?)\((?P<line>\d+)\): (?P<kind>catastrophic error|error|warning|remark)"
                  r"(?: #(?P<code>[\w-]+))?: (?P<message>.*)$")
GCC = re.compile(r"^(?P<file>[^\s:][^:\n]*?):(?P<line>\d+):(?:(?P<column>\d+):)? "
                 r"(?P<kind>fatal error|error|warning|note): (?P<message>.*)$")
PTXAS = re.compile(r"^ptxas\s+(?P<kind>error|fatal)\s*:\s*(?P<message>.*)$")
LINKER = re.compile(r"(?P<message>undefined reference to .*)$")
NVCC_AT = re.compile(r"at line (?P<line>\d+) of (?P<file>\S+)")
NVCC_AT_HERE = re.compile(r"at line (?P<line>\d+)\s*$")  # a template instantiated in the same file
GCC_FUNCTION = re.compile(r"^(?P<file>[^\s:][^:\n]*): In (?:static |member )*function [‘'`](?P<function>.*)[’'`]:$")
GCC_REQUIRED = re.compile(r"^(?P<file>[^\s:][^:\n]*?):(?P<line>\d+):(?P<column>\d+):\s+required from")
GCC_QUOTED = re.compile(r"^\s*(?:\d+)?\s*\|\s?(?P<code>.*)$")
EXTENSION = re.compile(r"Error building extension '(?P<name>[^']+)'")
TOOLCHAIN = (
    ("CUDA_HOME environment variable is not set", "no CUDA toolkit found (CUDA_HOME unset): CUDA extensions "
     "build only on a machine with nvcc"),
    ("Ninja is required", "ninja is not installed: torch.utils.cpp_extension needs it to build"),
    ("nvcc: not found", "nvcc is not on PATH"),
    ("No such file or directory: 'nvcc'", "nvcc is not on PATH"),
)
NOT_FUNCTIONS = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "alignas", "static_assert",
                 "__launch_bounds__", "__attribute__", "__declspec", "TORCH_CHECK", "AT_DISPATCH_FLOATING_TYPES"}


def _is_generated(path: str) -> bool:
    return PurePosixPath(path).name in GENERATED


def demangle(symbol: str) -> str | None:
    """The function's own name in an Itanium-mangled symbol: _Z6affineN2at6TensorEdd -> affine,
    _ZN2ns3fooEv -> foo (enough to find it in the source; c++filt gives the full signature)."""
    found = re.match(r"_Z(N?)", symbol)
    if not found:
        return None
    rest, names = symbol[found.end():], []
    if found.group(1):
        rest = re.sub(r"^[rVK]+", "", rest)
    while rest and rest[0].isdigit():
        length = re.match(r"\d+", rest).group(0)
        names.append(rest[len(length):len(length) + int(length)])
        rest = rest[len(length) + int(length):]
        if not found.group(1):
            break
    return names[-1] if names else None


def parse_build_log(log: str) -> dict[str, Any] | None:
    """The first error of a build log: {compiler ("nvcc", "c++", "ptxas", "linker" or "toolchain"),
    message, file (the generated file), log_line (its line there), column, error_line (as printed),
    context (the compiler's quoted source, caret, instantiation notes), function (g++'s "In function"),
    extension, errors (how many)}, with `header` when the error is in an included file and the line
    is the generated file's line that led there. None if the log names no error."""
    if not log:
        return None
    lines = log.splitlines()
    extension = EXTENSION.search(log)
    first: dict[str, Any] | None = None
    count = 0
    gcc_function = None
    for index, line in enumerate(lines):
        function = GCC_FUNCTION.match(line)
        if function:
            gcc_function = function.group("function")
            continue
        found, compiler = NVCC.match(line), "nvcc"
        if not found:
            found, compiler = GCC.match(line), "c++"
        if found and "error" in found.group("kind"):
            count += 1
            if first is None:
                first = {"compiler": compiler, "message": found.group("message").strip(), "file": found.group("file"),
                         "log_line": int(found.group("line")),
                         "column": int(found.group("column")) if found.groupdict().get("column") else None,
                         "error_line": line.strip(), "context": _context(lines, index + 1, compiler),
                         "function": gcc_function if compiler == "c++" else None}
            continue
        found = PTXAS.match(line.strip())
        if found:
            count += 1
            if first is None:
                first = {"compiler": "ptxas", "message": found.group("message").strip(), "error_line": line.strip(),
                         "context": []}
            continue
        found = LINKER.search(line)
        if found and first is None:
            count += 1
            first = {"compiler": "linker", "message": found.group("message").strip(), "error_line": line.strip(),
                     "context": []}
    if first is None:
        for needle, meaning in TOOLCHAIN:
            if needle in log:
                return {"compiler": "toolchain", "message": meaning, "error_line": needle, "context": [], "errors": 1}
        return None
    first["errors"] = count
    if first["compiler"] == "nvcc" and first["column"] is None:
        first["column"] = _nvcc_column(first["context"])
    if first.get("file") and not _is_generated(first["file"]):
        _follow_to_source(first, lines)
    elif first["compiler"] == "nvcc":
        here = next((NVCC_AT_HERE.search(c) for c in first["context"] if NVCC_AT_HERE.search(c)), None)
        if here:
            first["instantiated_at"] = int(here.group("line"))
    if extension:
        first["extension"] = extension.group("name")
    elif first.get("file") and _is_generated(first["file"]):
        first["extension"] = PurePosixPath(first["file"]).parent.name
    symbol = re.search(r"'(_Z\w+)'|`(_Z\w+)'", first["message"])
    if symbol:
        first["symbol"] = symbol.group(1) or symbol.group(2)
        first["function"] = demangle(first["symbol"])
    return first


def _context(lines: list[str], start: int, compiler: str) -> list[str]:
    out = []
    for line in lines[start:start + 12]:
        if not line.strip():
            if compiler == "nvcc":
                break
            continue
        if compiler == "c++" and not (GCC_QUOTED.match(line) or GCC_REQUIRED.match(line) or "required from" in line):
            break
        if compiler == "nvcc" and (NVCC.match(line) or line.startswith(("ninja:", "FAILED:", "["))):
            break
        out.append(line.rstrip())
    return out


def _nvcc_column(context: list[str]) -> int | None:
    """nvcc quotes the line indented by 2 and puts a caret under the error."""
    if len(context) >= 2 and context[1].strip() == "^":
        return max(context[1].index("^") - 2, 0) + 1
    return None


def _follow_to_source(first: dict[str, Any], lines: list[str]) -> None:
    """An error inside a header (torch's, a template): the generated file's line that instantiated it."""
    for line in first["context"]:
        found = NVCC_AT.search(line)
        if found and _is_generated(found.group("file")):
            first["header"] = {"file": first["file"], "line": first["log_line"]}
            first["file"], first["log_line"] = found.group("file"), int(found.group("line"))
            return
    start = next((i for i, line in enumerate(lines) if line.strip() == first["error_line"]), None)
    for line in lines[(start or 0) + 1:(start or 0) + 40]:
        found = GCC_REQUIRED.match(line.strip())
        if found and _is_generated(found.group("file")):
            first["header"] = {"file": first["file"], "line": first["log_line"]}
            first["file"], first["log_line"] = found.group("file"), int(found.group("line"))
            first["column"] = int(found.group("column"))
            return


# -- the candidate's load_inline calls -----------------------------------------------------------------

def _module_strings(tree: ast.Module) -> dict[str, list[ast.Assign]]:
    out: dict[str, list[ast.Assign]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node)
    return out


def _segments(expr: ast.AST | None, assigns: dict[str, list[ast.Assign]], before: int, depth: int = 0) -> list[dict]:
    """The source strings an argument of load_inline stands for: [{text, line, end_line, exact,
    variable}]; text None where it cannot be read from the source (built at run time)."""
    if expr is None or depth > 5:
        return []
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        exact = expr.value.count("\n") == (expr.end_lineno or expr.lineno) - expr.lineno
        return [{"text": expr.value, "line": expr.lineno, "end_line": expr.end_lineno, "exact": exact,
                 "variable": None}]
    if isinstance(expr, ast.Name):
        candidates = [a for a in assigns.get(expr.id, []) if a.lineno < before] or assigns.get(expr.id, [])
        if not candidates:
            return [{"text": None, "line": None, "end_line": None, "exact": False, "variable": expr.id}]
        found = _segments(candidates[-1].value, assigns, candidates[-1].lineno, depth + 1)
        for segment in found:
            segment["variable"] = segment["variable"] or expr.id
        return found
    if isinstance(expr, (ast.List, ast.Tuple)):
        return [s for item in expr.elts for s in _segments(item, assigns, before, depth + 1)]
    if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "join"
            and isinstance(expr.func.value, ast.Constant) and isinstance(expr.func.value.value, str)
            and len(expr.args) == 1 and isinstance(expr.args[0], (ast.List, ast.Tuple))
            and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in expr.args[0].elts)):
        text = expr.func.value.value.join(e.value for e in expr.args[0].elts)  # "\n".join([...lines])
        return [{"text": text, "line": expr.lineno, "end_line": expr.end_lineno, "exact": False, "variable": None}]
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        parts = _segments(expr.left, assigns, before, depth + 1) + _segments(expr.right, assigns, before, depth + 1)
        if parts and all(p["text"] is not None for p in parts):
            lines = [p["line"] for p in parts if p["line"]]
            return [{"text": "".join(p["text"] for p in parts), "line": min(lines, default=expr.lineno),
                     "end_line": max((p["end_line"] or 0 for p in parts), default=expr.end_lineno),
                     "exact": False, "variable": next((p["variable"] for p in parts if p["variable"]), None)}]
    return [{"text": None, "line": expr.lineno, "end_line": expr.end_lineno, "exact": False, "variable": None}]


def _keyword(call: ast.Call, name: str, position: int | None = None) -> ast.AST | None:
    for item in call.keywords:
        if item.arg == name:
            return item.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


def load_inline_calls(source: str) -> list[dict[str, Any]]:
    """Each load_inline call of the candidate: {name, line, functions_line, no_implicit_headers,
    cpp_sources, cuda_sources, sycl_sources (lists of segments)}."""
    try:
        tree = source_ast.parse(source)
    except SyntaxError:
        return []
    assigns = _module_strings(tree)
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name != "load_inline":
            continue
        ext = _segments(_keyword(node, "name", 0), assigns, node.lineno)
        implicit = _keyword(node, "no_implicit_headers")
        functions = _keyword(node, "functions")
        calls.append({
            "name": ext[0]["text"] if ext and ext[0]["text"] is not None else None,
            "line": node.lineno,
            "functions_line": functions.lineno if functions is not None else node.lineno,
            "has_functions": functions is not None and not (isinstance(functions, ast.Constant)
                                                            and functions.value is None),
            "no_implicit_headers": isinstance(implicit, ast.Constant) and bool(implicit.value),
            "cpp_sources": _segments(_keyword(node, "cpp_sources", 1), assigns, node.lineno),
            "cuda_sources": _segments(_keyword(node, "cuda_sources", 2), assigns, node.lineno),
            "sycl_sources": _segments(_keyword(node, "sycl_sources"), assigns, node.lineno),
        })
    return sorted(calls, key=lambda c: c["line"])


def _enclosing_function(lines: list[str], upto: int) -> str | None:
    """The C++ function whose body holds line `upto` (1-based) of a source string."""
    stack: list[str | None] = []
    pending = None
    for line in lines[:upto]:
        code = re.sub(r"//.*$", "", line)
        code = re.sub(r'"(?:\\.|[^"\\])*"', '""', code)
        if not any(stack):
            for found in re.finditer(r"([A-Za-z_]\w*)\s*\(", code):
                if found.group(1) not in NOT_FUNCTIONS:
                    pending = found.group(1)
                    break
        for char in code:
            if char == "{":
                stack.append(pending if not any(stack) else None)
                pending = None
            elif char == "}" and stack:
                stack.pop()
            elif char == ";" and not stack:
                pending = None
    return next((name for name in stack if name), None)


def _find_text(file_lines: list[str], text: str, lo: int | None = None, hi: int | None = None) -> int | None:
    needle = text.strip()
    if not needle:
        return None
    lo, hi = lo or 1, hi or len(file_lines)
    for number in range(lo, min(hi, len(file_lines)) + 1):
        if file_lines[number - 1].strip() == needle:
            return number
    for number in range(1, len(file_lines) + 1):  # the same text anywhere: a string built another way
        if needle in file_lines[number - 1]:
            return number
    return None


def _quoted_source(parsed: dict[str, Any]) -> str | None:
    for line in parsed.get("context") or []:
        if parsed["compiler"] == "c++":
            found = GCC_QUOTED.match(line)
            if found and found.group("code").strip() and set(found.group("code").strip()) - set("^~"):
                return found.group("code")
        elif line.strip() and line.strip() != "^" and "detected during" not in line:
            return line
    return None


def map_build_error(parsed: dict[str, Any], source: str | None, path: str | None = None) -> dict[str, Any]:
    """`parsed` (parse_build_log) with the candidate's side added where it can be found: file (the
    candidate), line, text, function (the C++ function), source_kind ("cuda_sources",
    "cpp_sources", "bindings" or "implicit headers"), string_line (line inside the source string),
    variable (the Python name holding the string), load_inline_line."""
    out = dict(parsed)
    out["generated_file"] = parsed.get("file")
    out["file"] = path
    out.pop("line", None)
    if not source:
        return out
    file_lines = source.splitlines()
    calls = load_inline_calls(source)
    call = None
    if calls:
        call = next((c for c in calls if c["name"] and c["name"] == parsed.get("extension")), None) or calls[0]
        out["load_inline_line"] = call["line"]
    generated = PurePosixPath(parsed.get("file") or "").name
    if call and generated in GENERATED and parsed.get("log_line"):
        _map_generated(out, call, generated, parsed["log_line"], file_lines)
        if parsed.get("instantiated_at"):
            instantiation: dict[str, Any] = {}
            _map_generated(instantiation, call, generated, parsed["instantiated_at"], file_lines)
            if instantiation.get("line"):
                out["instantiated_line"] = instantiation["line"]
    elif call and parsed.get("function") and parsed["compiler"] in ("ptxas", "linker"):
        # ptxas names a kernel (defined in cuda_sources); the linker a function whose declaration
        # (cpp_sources) has no definition with its signature
        order = ("cuda_sources", "cpp_sources") if parsed["compiler"] == "ptxas" else ("cpp_sources", "cuda_sources")
        _map_function(out, call, parsed["function"], file_lines, order)
    if "line" not in out:
        quoted = _quoted_source(parsed)
        found = _find_text(file_lines, quoted) if quoted else None
        if found:
            out["line"] = found
    if out.get("line"):
        out["text"] = file_lines[out["line"] - 1].strip() if out["line"] <= len(file_lines) else ""
    return out


def _map_generated(out: dict[str, Any], call: dict[str, Any], generated: str, log_line: int,
                   file_lines: list[str]) -> None:
    kind = GENERATED[generated]
    segments = call[kind]
    offset = 0 if call["no_implicit_headers"] else IMPLICIT_LINES[generated]
    if log_line <= offset:
        out.update(source_kind="implicit headers", line=call["line"])
        return
    start = offset + 1
    for segment in segments:
        if segment["text"] is None:
            return  # built at run time: the lines after it cannot be counted
        count = segment["text"].count("\n") + 1
        if log_line < start + count:
            inner = log_line - start + 1
            seg_lines = segment["text"].split("\n")
            out.update(source_kind=kind, string_line=inner, variable=segment["variable"])
            if segment["exact"] and segment["line"]:
                out["line"] = segment["line"] + inner - 1
            else:
                found = _find_text(file_lines, seg_lines[inner - 1], segment["line"], segment["end_line"])
                out["line"] = found or segment["line"]
            out["function"] = _enclosing_function(seg_lines, inner) or out.get("function")
            return
        start += count
    if kind == "cpp_sources" and call["has_functions"]:
        out.update(source_kind="bindings", line=call["functions_line"])


def _map_function(out: dict[str, Any], call: dict[str, Any], function: str, file_lines: list[str],
                  order: tuple[str, ...]) -> None:
    """ptxas and the linker name a function, not a line: point at where the source names it."""
    pattern = re.compile(rf"\b{re.escape(function)}\s*\(")
    for kind in order:
        for segment in call[kind]:
            if segment["text"] is None:
                continue
            for inner, text in enumerate(segment["text"].split("\n"), start=1):
                if pattern.search(text) and "<<<" not in text and not text.strip().startswith("//"):
                    out.update(source_kind=kind, string_line=inner, variable=segment["variable"])
                    if segment["exact"] and segment["line"]:
                        out["line"] = segment["line"] + inner - 1
                    else:
                        found = _find_text(file_lines, text, segment["line"], segment["end_line"])
                        out["line"] = found or segment["line"]
                    return


def build_error_details(log: str, source: str | None, path: str | None = None) -> dict[str, Any] | None:
    """parse_build_log + map_build_error; None if the log names no error."""
    try:
        parsed = parse_build_log(log)
        return map_build_error(parsed, source, path) if parsed else None
    except Exception:  # a diagnosis aid: it must never hide the error it describes
        return None


def undefined_symbol(message: str, source: str | None, path: str | None = None) -> dict[str, Any] | None:
    """An extension that built but does not load ("undefined symbol: _Z6affine..."): a function
    declared (cpp_sources, bound by `functions`) but defined nowhere with that signature."""
    found = re.search(r"undefined symbol: (\S+)", message or "")
    if not found:
        return None
    symbol = found.group(1)
    out: dict[str, Any] = {"compiler": "linker", "message": f"undefined symbol {symbol}", "symbol": symbol,
                           "function": demangle(symbol), "error_line": found.group(0), "context": [], "errors": 1}
    return map_build_error(out, source, path) if source else out
