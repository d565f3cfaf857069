"""Which string constants of the file are C++/CUDA sources (they look like C++, or they reach a
``load_inline`` source argument; docstrings and other bare string statements aside), which of them only nvcc
compiles, and on which line of the candidate file each of their characters stands. Each source is handed to
``cpp_scan``."""

from __future__ import annotations

import ast
import re

from . import cpp_scan
from .program import Program
from .report import Report
from .syntax import flatten_targets

_CPP_MARKERS = re.compile(
    r"__global__|__device__|#\s*include|\b(?:torch|at|c10)::|<<<|PYBIND11_MODULE|TORCH_LIBRARY|"
    r"\bcu(?:blas|dnn|fft|sparse|solver)[A-Z]\w*\s*\(|\bcutlass::|\bcudaStream|\bcudaEvent")
# CUDA's function qualifiers defined away (in the source or by a compiler flag)
CPP_QUALIFIER_REDEFINED = re.compile(r"#\s*(?:define|undef)\s+__(?:device|global|host)__\b"
                                     r"|-[DU]\s*__(?:device|global|host)__")


class CppSources:
    def __init__(self, program: Program, report: Report, prose: set):
        self.program = program
        self.report = report
        self.prose = prose  # docstrings and other bare string statements
        self._ext_sources = extension_sources(program)
        self._in_fstring = {v for n in program.nodes if isinstance(n, ast.JoinedStr) for v in n.values}
        # C++ compiled with CUDA's qualifiers defined away: its __device__ functions are host code
        self._device_redefined = any(
            isinstance(n, ast.Constant) and isinstance(n.value, str) and CPP_QUALIFIER_REDEFINED.search(n.value)
            for n in program.nodes)

    def visit(self, n):
        """Scan the node when it is a C++ source."""
        if (isinstance(n, ast.Constant) and isinstance(n.value, str) and n not in self.prose
                and (_CPP_MARKERS.search(n.value) or id(n) in self._ext_sources)):
            # __device__/__global__ bodies are device code only where nvcc compiles the source (cuda_sources) and
            # the qualifiers are not defined away; g++ (cpp_sources) compiles them as host code
            device_code = self._ext_sources.get(id(n)) == {"cuda"} and not self._device_redefined
            cpp_scan.check(n.value, self._line_of(n), device_code, self.report)

    def _line_of(self, n: ast.Constant):
        """pos in the constant's value -> the line of the candidate file where that character stands."""
        code = n.value
        lines = None
        if n not in self._in_fstring:
            segment = ast.get_source_segment(self.program.source, n)
            if segment is not None:
                lines = _string_line_map(segment, n.lineno, code)
        if lines:
            last = lines[-1]
            return lambda pos: lines[pos] if 0 <= pos < len(lines) else last
        return lambda pos: n.lineno + code.count("\n", 0, pos)


def extension_sources(program: Program) -> dict[int, set[str]]:
    """ids of the str constants that reach a load_inline source argument -> {"cpp", "cuda"}: through
    names (assigned anywhere), self attributes, lists, +, str.join/format, f-strings, calls and the
    returns of the file's functions. A ** argument counts as cpp_sources."""
    assigns: dict[str, list] = {}
    for node in program.nodes:
        if isinstance(node, ast.Assign):
            for t in flatten_targets(node.targets):
                key = t.id if isinstance(t, ast.Name) else "." + t.attr if isinstance(t, ast.Attribute) else None
                if key:
                    assigns.setdefault(key, []).append(node.value)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            t = node.target
            key = t.id if isinstance(t, ast.Name) else "." + t.attr if isinstance(t, ast.Attribute) else None
            if key:
                assigns.setdefault(key, []).append(node.value)
        elif isinstance(node, ast.Return) and node.value is not None:
            fn = program.enclosing_function(node)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assigns.setdefault(fn.name, []).append(node.value)
    out: dict[int, set[str]] = {}

    def collect(root, kind: str):
        seen: set[str] = set()
        stack = [root]
        while stack:
            x = stack.pop()
            if isinstance(x, ast.Constant):
                if isinstance(x.value, str):
                    out.setdefault(id(x), set()).add(kind)
                continue
            key = x.id if isinstance(x, ast.Name) else "." + x.attr if isinstance(x, ast.Attribute) else None
            if key and key not in seen:
                seen.add(key)
                stack.extend(assigns.get(key, []))
            if not isinstance(x, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stack.extend(ast.iter_child_nodes(x))

    for node in program.nodes:
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name != "load_inline" and (program.qualname(f, None) or "") != "torch.utils.cpp_extension.load_inline":
            continue
        for i, a in enumerate(node.args[1:3]):
            collect(a, "cpp" if i == 0 else "cuda")
        for kw in node.keywords:
            if kw.arg in ("cpp_sources", "cuda_sources", "sycl_sources", None):
                collect(kw.value, "cuda" if kw.arg == "cuda_sources" else "cpp")
    return out


_PY_STRING_START = re.compile(r"""([rRbBuUfF]{0,2})('''|\"\"\"|'|")""")


def _string_line_map(segment: str, first_line: int, value: str) -> list[int] | None:
    """The source line of every character of a str constant's value, read from the constant's source text
    (escapes, line continuations and implicitly concatenated parts followed); None when the text cannot
    be followed (f-strings, bytes, anything that does not decode to the value)."""
    out: list[int] = []
    i, n, line = 0, len(segment), first_line
    while i < n:
        ch = segment[i]
        if ch in " \t\f()":
            i += 1
        elif ch == "\n":
            line, i = line + 1, i + 1
        elif ch == "\r":
            i += 2 if segment.startswith("\r\n", i) else 1
            line += 1
        elif ch == "\\" and segment[i + 1: i + 2] in ("\n", "\r"):
            i += 3 if segment.startswith("\r\n", i + 1) else 2
            line += 1
        elif ch == "#":
            j = segment.find("\n", i)
            i = n if j < 0 else j
        else:
            m = _PY_STRING_START.match(segment, i)
            if not m or set(m.group(1).lower()) & set("fb"):
                return None
            raw, q = "r" in m.group(1).lower(), m.group(2)
            i = m.end()
            while True:
                if i >= n:
                    return None
                if segment.startswith(q, i):
                    i += len(q)
                    break
                c = segment[i]
                if c == "\r":
                    i += 1
                    continue  # \r\n in the file is one \n in the value
                if c == "\\" and not raw:
                    nxt = segment[i + 1: i + 2]
                    if nxt in ("\n", "\r"):
                        i += 3 if segment.startswith("\r\n", i + 1) else 2
                        line += 1
                        continue
                    width = {"x": 4, "u": 6, "U": 10}.get(nxt, 2)
                    if nxt == "N":
                        close = segment.find("}", i)
                        width = (close + 1 - i) if close > 0 else 2
                    elif nxt and nxt in "01234567":
                        while width < 4 and segment[i + width: i + width + 1] in tuple("01234567"):
                            width += 1
                    elif nxt not in tuple("\\'\"abfnrtvxuU"):
                        out.append(line)  # an unknown escape keeps its backslash
                    out.append(line)
                    i += width
                    continue
                if c == "\\" and raw:  # kept, and the next character cannot end the string
                    out.append(line)
                    i += 1
                    c = segment[i: i + 1]
                    if not c:
                        return None
                out.append(line)
                if c == "\n":
                    line += 1
                i += 1
    return out if len(out) == len(value) else None
