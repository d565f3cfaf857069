"""A parent's kernels in a few lines, for a model about to edit it: each kernel, what it computes (its docstring,
or the comment its launch carries), its grid, the precision of its dots, and the constants that bind it to
sizes (compile-time constants at the launch, the sizes a composed candidate checks at call time). Read from
the source's syntax tree only; a source that does not parse gets no summary."""

from __future__ import annotations

import ast
import re

PRECISION_WORDS = ("input_precision", "DOT_PRECISION", "allow_tf32")
LOOK_BACK = 12  # lines above a launch searched for the comment that says what it computes
LONGEST = 120  # characters of a grid expression shown
SUMMARY_COMMENT = re.compile(r"^# [\w ]+ kernel: ")


def _is_jit(node: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in node.decorator_list)


def _launches(tree: ast.AST) -> dict[str, list[ast.Call]]:
    """kernel name -> its launches `kernel[grid](...)`."""
    found: dict[str, list[ast.Call]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and \
                isinstance(node.func.value, ast.Name):
            found.setdefault(node.func.value.id, []).append(node)
    return found


def _what(kernel: ast.FunctionDef, source_lines: list[str], launch: ast.Call | None,
          enclosing: dict[int, ast.FunctionDef]) -> str:
    doc = ast.get_docstring(kernel)
    if doc:
        return _first_sentence(doc)
    if launch is None:
        return "no docstring"
    helper = enclosing.get(id(launch))
    if helper is not None and helper.name != "forward" and ast.get_docstring(helper):
        return _first_sentence(ast.get_docstring(helper))  # a helper's kernel: the helper says
    # the comment its launch's lines start with (the composer's "# conv kernel: conv, add")
    for line in reversed(source_lines[max(0, launch.lineno - 1 - LOOK_BACK):launch.lineno - 1]):
        text = line.strip()
        if SUMMARY_COMMENT.match(text):
            return text.lstrip("# ").strip()
        if not text or "](" in text:  # a blank line or another launch: no comment of this one's
            break
    return "no docstring"


def _first_sentence(doc: str) -> str:
    paragraph = " ".join(doc.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[:end + 1]


def _enclosing(tree: ast.AST) -> dict[int, ast.FunctionDef]:
    """id of each call -> the function it is in."""
    found: dict[int, ast.FunctionDef] = {}
    for function in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                found[id(node)] = function
    return found


def _bound_sizes(call: ast.Call) -> list[str]:
    """`what = value` of each (what, now, then) check of a `_composed_for` call."""
    out = []
    for check in call.args:
        if isinstance(check, ast.Tuple) and len(check.elts) == 3 and isinstance(check.elts[0], ast.Constant):
            out.append(f"{check.elts[0].value} = {ast.unparse(check.elts[2])}")
    return out


def _precisions(kernel: ast.FunctionDef, launch: ast.Call | None) -> list[str]:
    words = set()
    for node in ast.walk(kernel):
        if isinstance(node, ast.keyword) and node.arg in PRECISION_WORDS:
            words.add(f"{node.arg}={ast.unparse(node.value)}")
    for keyword in (launch.keywords if launch is not None else []):
        if keyword.arg in PRECISION_WORDS:
            words.add(f"{keyword.arg}={ast.unparse(keyword.value)}")
    return sorted(words)


def summary_lines(source: str) -> list[str]:
    """One line per kernel, then one for the sizes the file checks at call time (if any)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    launches, enclosing = _launches(tree), _enclosing(tree)
    out = []
    for node in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_jit(n)]:
        sites = launches.get(node.name, [])
        first = sites[0] if sites else None
        parts = [f"`{node.name}`: {_what(node, lines, first, enclosing)}"]
        if first is not None:
            grid = ast.unparse(first.func.slice)
            parts.append(f"grid {grid if len(grid) <= LONGEST else grid[:LONGEST] + ' ...'}")
            constants = [f"{k.arg}={ast.unparse(k.value)}" for k in first.keywords
                         if k.arg and k.arg not in PRECISION_WORDS]
            if constants:
                parts.append("constants " + ", ".join(constants))
            if len(sites) > 1:
                parts.append(f"launched at {len(sites)} places")
        else:
            parts.append("launched from another helper (or not at all)")
        precisions = _precisions(node, first)
        parts.append("dots: " + ", ".join(precisions) if precisions else "no precision set on its dots")
        out.append("; ".join(parts))
    bound = [size for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
             and node.func.id == "_composed_for" for size in _bound_sizes(node)]
    if bound:
        out.append("sizes it is bound to (checked when forward runs): " + ", ".join(bound))
    return out
