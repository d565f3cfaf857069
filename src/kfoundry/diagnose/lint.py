"""A static look at a candidate's Triton kernels: the faults that compile on one machine and fail
on another, or read out of bounds without a word.

Rules (each item: rule, line, column, kernel, text, message):

- `load-without-mask` / `store-without-mask`: a `tl.load` / `tl.store` through a block of pointers
  (offsets from `tl.arange`) with no `mask=` (block pointers with `boundary_check` are fine).
- `load-mask-without-other`: a masked `tl.load` with no `other=`: its masked-off lanes are
  undefined on a GPU (zeros in the interpreter), which matters once they reach a reduction or a dot.
- `block-not-constexpr`: a kernel parameter that sets a block shape (`tl.arange`, `tl.zeros`, ...)
  but is not annotated `tl.constexpr`.
- `arange-not-pow2` / `shape-not-pow2`: a literal `tl.arange` length or block dimension that is
  not a power of 2; `launch-not-pow2`: a launch passes such a literal for a shape parameter.
- `dot-small-block`: a `tl.dot` whose operands have a literal block dimension under 16 (a GPU
  needs K >= 16; the interpreter accepts smaller).

Only what the source says is judged: a block size that arrives at run time is not guessed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from kfoundry import source_ast
from kfoundry.types import DiagnosticFinding, SourceLocation

SHAPE_FUNCTIONS = {"zeros": 0, "full": 0, "ones": 0, "reshape": 1, "view": 1, "broadcast_to": 1}
REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "reduce", "cumsum", "cumprod", "associative_scan", "dot",
              "xor_sum", "atomic_add", "atomic_max", "atomic_min"}
MIN_DOT = 16

DIRECTIONS = {
    "load-without-mask": "mask the load: tl.load(ptr + offs, mask=offs < n, other=0.0)",
    "store-without-mask": "mask the store: tl.store(ptr + offs, value, mask=offs < n)",
    "load-mask-without-other": "give the load other= with the identity of what consumes it "
                               "(0.0 for a sum or a dot, float('-inf') for a max, float('inf') for a min)",
    "block-not-constexpr": "annotate the block-size parameter `: tl.constexpr` and pass it as a keyword at the "
                           "launch; keep the run-time size as its own argument for the masks",
    "arange-not-pow2": "make block sizes powers of 2 (BLOCK = triton.next_power_of_2(n) on the host) and mask "
                       "the tail with offs < n",
    "shape-not-pow2": "make every block dimension a power of 2 and mask the tail",
    "launch-not-pow2": "pass a power of 2 (triton.next_power_of_2(n)) and mask the tail with offs < n",
    "dot-small-block": "use tiles of at least 16 along M, N and K for tl.dot (on NVIDIA GPUs K >= 16 is required; "
                       "the interpreter accepts smaller tiles) and mask the tails",
}


def _is_pow2(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _constant_int(node: ast.AST | None, known: dict[str, int] | None = None) -> int | None:
    """The value of a small integer expression of literals (and names in `known`), else None."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and known and node.id in known:
        return known[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant_int(node.operand, known)
        return -inner if inner is not None else None
    if isinstance(node, ast.BinOp):
        left, right = _constant_int(node.left, known), _constant_int(node.right, known)
        if left is None or right is None:
            return None
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b if b else None,
               ast.LShift: lambda a, b: a << b if 0 <= b < 64 else None,
               ast.Pow: lambda a, b: a ** b if 0 <= b < 64 else None}
        op = ops.get(type(node.op))
        return op(left, right) if op else None
    return None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _line_text(lines: list[str], line: int) -> str:
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def _is_jit(function: ast.FunctionDef) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target).split(".")[-1] == "jit":
            return True
    return False


class _Language:
    """How the candidate spells triton.language: `tl.load`, `triton.language.load`, `from
    triton.language import load`."""

    def __init__(self, tree: ast.AST) -> None:
        self.modules = {"tl", "triton.language"}
        self.direct: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "triton.language" and alias.asname:
                        self.modules.add(alias.asname)
                    elif alias.name == "triton" and alias.asname:
                        self.modules.add(f"{alias.asname}.language")
            elif isinstance(node, ast.ImportFrom) and node.module == "triton":
                for alias in node.names:
                    if alias.name == "language":
                        self.modules.add(alias.asname or "language")
            elif isinstance(node, ast.ImportFrom) and node.module == "triton.language":
                for alias in node.names:
                    self.direct[alias.asname or alias.name] = alias.name

    def function(self, call: ast.AST) -> str | None:
        """`load` for a call of tl.load (however spelled), else None."""
        if not isinstance(call, ast.Call):
            return None
        func = call.func
        if isinstance(func, ast.Attribute) and ast.unparse(func.value) in self.modules:
            return func.attr
        if isinstance(func, ast.Name) and func.id in self.direct:
            return self.direct[func.id]
        return None


def _argument(call: ast.Call, position: int, keyword: str) -> ast.AST | None:
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        return call.args[position]
    return None


@dataclass
class _Kernel:
    node: ast.FunctionDef
    language: _Language
    params: dict[str, str] = field(default_factory=dict)  # name -> annotation text
    values: dict[str, list[ast.AST]] = field(default_factory=dict)  # local name -> expressions assigned to it
    reach: dict[str, set[str]] = field(default_factory=dict)  # local name -> every name it depends on

    def __post_init__(self) -> None:
        args = self.node.args
        for arg in args.posonlyargs + args.args + args.kwonlyargs:
            self.params[arg.arg] = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        for node in ast.walk(self.node):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._bind(target, node.value)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                self._bind(node.target, node.value)
            elif isinstance(node, ast.NamedExpr):
                self._bind(node.target, node.value)
            elif isinstance(node, ast.For):
                self._bind(node.target, node.iter)
        self.reach = {name: set().union(*(_names(v) for v in exprs)) for name, exprs in self.values.items()}
        changed = True
        while changed:  # the transitive closure; loops (acc += ...) make cycles
            changed = False
            for deps in self.reach.values():
                extra = set().union(*(self.reach.get(d, set()) for d in deps)) - deps
                if extra:
                    deps |= extra
                    changed = True

    def _bind(self, target: ast.AST, value: ast.AST) -> None:
        for name in _names(target):
            self.values.setdefault(name, []).append(value)

    @property
    def name(self) -> str:
        return self.node.name

    def constexpr(self, param: str) -> bool:
        return self.params.get(param, "").endswith("constexpr")

    def depends_on(self, expr: ast.AST) -> set[str]:
        """Every name `expr` reads, directly or through the kernel's assignments."""
        direct = _names(expr)
        return direct.union(*(self.reach.get(n, set()) for n in direct))

    def sources(self, expr: ast.AST) -> list[ast.AST]:
        """The expressions `expr` is computed from: itself and every value assigned to a name it depends on."""
        out = [expr]
        for name in sorted(self.depends_on(expr)):
            out += self.values.get(name, [])
        return out

    def calls(self, expr: ast.AST, function: str) -> list[ast.Call]:
        """The calls of tl.<function> that `expr` is computed from."""
        seen, out = set(), []
        for source in self.sources(expr):
            for node in ast.walk(source):
                if id(node) not in seen and self.language.function(node) == function:
                    seen.add(id(node))
                    out.append(node)
        return out

    def is_block_of_pointers(self, pointer: ast.AST) -> bool:
        """True if the pointer has offsets from tl.arange (a block), not a block pointer or a scalar."""
        if self.calls(pointer, "make_block_ptr") or self.calls(pointer, "advance"):
            return False
        return bool(self.calls(pointer, "arange"))

    def shape_expressions(self) -> list[tuple[ast.Call, ast.AST]]:
        """(call, argument) for every argument that sets a block shape."""
        out = []
        for node in ast.walk(self.node):
            function = self.language.function(node)
            if function in ("arange", "static_range"):
                out += [(node, arg) for arg in node.args[:2]]
            elif function in SHAPE_FUNCTIONS:
                shape = _argument(node, SHAPE_FUNCTIONS[function], "shape")
                if shape is not None:
                    items = shape.elts if isinstance(shape, (ast.Tuple, ast.List)) else [shape]
                    out += [(node, item) for item in items]
            elif function == "make_block_ptr":
                shape = _argument(node, 4, "block_shape")
                if isinstance(shape, (ast.Tuple, ast.List)):
                    out += [(node, item) for item in shape.elts]
        return out

    def shape_parameters(self) -> set[str]:
        """The parameters that set a block shape."""
        out = set()
        for _, arg in self.shape_expressions():
            out |= self.depends_on(arg) & set(self.params)
        return out


def _kernels(tree: ast.AST, language: _Language) -> list[_Kernel]:
    return [_Kernel(node, language) for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and _is_jit(node)]


def _item(rule: str, node: ast.AST, kernel: str, lines: list[str], message: str) -> dict[str, Any]:
    return {"rule": rule, "line": node.lineno, "column": node.col_offset + 1, "kernel": kernel,
            "text": _line_text(lines, node.lineno), "message": message}


def _module_constants(tree: ast.Module) -> dict[str, int]:
    """Module-level NAME = <int> (and NAME = tl.constexpr(<int>)), which kernels may read."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("constexpr") and value.args:
                value = value.args[0]
            number = _constant_int(value)
            if number is not None:
                out[node.targets[0].id] = number
    return out


def _launch_values(tree: ast.AST, kernel: _Kernel) -> list[tuple[ast.Call, str, int]]:
    """(launch call, parameter, literal value) for each literal a launch `kernel[grid](...)` passes."""
    out = []
    order = list(kernel.params)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
            continue
        if ast.unparse(node.func.value).split(".")[-1] != kernel.name:
            continue
        for position, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                break
            number = _constant_int(arg)
            if number is not None and position < len(order):
                out.append((node, order[position], number))
        for keyword in node.keywords:
            number = _constant_int(keyword.value)
            if keyword.arg and number is not None:
                out.append((node, keyword.arg, number))
    return out


def _lint_kernel(kernel: _Kernel, tree: ast.Module, lines: list[str], constants: dict[str, int]) -> list[dict]:
    items: list[dict[str, Any]] = []
    name = kernel.name
    language = kernel.language
    consumers = [node for node in ast.walk(kernel.node) if language.function(node) in REDUCTIONS]

    for node in ast.walk(kernel.node):
        function = language.function(node)
        if function == "load":
            pointer = _argument(node, 0, "pointer")
            mask, other = _argument(node, 1, "mask"), _argument(node, 2, "other")
            if pointer is None or _argument(node, 3, "boundary_check") is not None:
                continue
            if not kernel.is_block_of_pointers(pointer):
                continue
            if mask is None:
                items.append(_item("load-without-mask", node, name, lines,
                                   f"tl.load in `{name}` has no mask: lanes past the end of the data read out of "
                                   "bounds (silently in the interpreter; garbage or a fault on a GPU)"))
            elif other is None:
                reached = _consumer_of(kernel, node, consumers)
                detail = (f"they reach tl.{language.function(reached)} at line {reached.lineno}" if reached
                          else "they matter if they reach a reduction, a dot or the output")
                items.append(_item("load-mask-without-other", node, name, lines,
                                   f"masked tl.load in `{name}` has no other=: its masked-off lanes are undefined "
                                   f"on a GPU (zeros in the interpreter); {detail}"))
        elif function == "store":
            pointer = _argument(node, 0, "pointer")
            if pointer is None or _argument(node, 2, "mask") is not None or _argument(node, 3, "boundary_check"):
                continue
            if kernel.is_block_of_pointers(pointer):
                items.append(_item("store-without-mask", node, name, lines,
                                   f"tl.store in `{name}` has no mask: lanes past the end write out of bounds "
                                   "(other tensors' memory, or a fault on a GPU)"))
        elif function == "arange" and len(node.args) >= 2:
            start = _constant_int(node.args[0], constants)
            end = _constant_int(node.args[1], constants)
            if start is not None and end is not None and not _is_pow2(end - start):
                items.append(_item("arange-not-pow2", node, name, lines,
                                   f"tl.arange({start}, {end}) in `{name}` has length {end - start}, not a power "
                                   "of 2: Triton refuses it"))
        elif function == "dot":
            items += _small_dot(kernel, node, tree, lines, constants)

    for call, arg in kernel.shape_expressions():
        if language.function(call) not in ("arange", "static_range"):
            size = _constant_int(arg, constants)
            if size is not None and not _is_pow2(size):
                items.append(_item("shape-not-pow2", call, name, lines,
                                   f"block dimension {size} in `{name}` is not a power of 2: Triton refuses it"))
    reported = set()
    for call, arg in kernel.shape_expressions():
        for param in sorted(kernel.depends_on(arg) & set(kernel.params)):
            if not kernel.constexpr(param) and (param, call.lineno) not in reported:
                reported.add((param, call.lineno))
                function = language.function(call)
                items.append(_item("block-not-constexpr", call, name, lines,
                                   f"`{param}` sets a block shape (tl.{function}) in `{name}` but is not annotated "
                                   "tl.constexpr: block shapes must be known when the kernel compiles"))
    shape_params = kernel.shape_parameters()
    for call, param, value in _launch_values(tree, kernel):
        if param in shape_params and not _is_pow2(value):
            items.append(_item("launch-not-pow2", call, name, lines,
                               f"the launch of `{name}` passes {param}={value}, which sets a block shape and is "
                               "not a power of 2"))
    return items


def _consumer_of(kernel: _Kernel, load: ast.Call, consumers: list[ast.Call]) -> ast.Call | None:
    """The first reduction or dot whose input is computed from `load`."""
    for consumer in consumers:
        for source in kernel.sources(consumer):
            if any(node is load for node in ast.walk(source)):
                return consumer
    return None


def _small_dot(kernel: _Kernel, dot: ast.Call, tree: ast.Module, lines: list[str],
               constants: dict[str, int]) -> list[dict]:
    sizes: set[int] = set()
    launch = {}
    for _, param, value in _launch_values(tree, kernel):
        launch.setdefault(param, value)
    for operand in dot.args[:2]:
        for arange in kernel.calls(operand, "arange"):
            if len(arange.args) >= 2:
                start = _constant_int(arange.args[0], constants)
                end = _constant_int(arange.args[1], {**constants, **launch})
                if start is not None and end is not None:
                    sizes.add(end - start)
        for function in SHAPE_FUNCTIONS:
            for call in kernel.calls(operand, function):
                shape = _argument(call, SHAPE_FUNCTIONS[function], "shape")
                for item in shape.elts if isinstance(shape, (ast.Tuple, ast.List)) else []:
                    size = _constant_int(item, {**constants, **launch})
                    if size is not None:
                        sizes.add(size)
    small = sorted(s for s in sizes if 0 < s < MIN_DOT)
    if not small:
        return []
    name = kernel.name
    return [_item("dot-small-block", dot, name, lines,
                  f"tl.dot in `{name}` multiplies blocks with a dimension of {', '.join(map(str, small))} (< 16): "
                  "a GPU build needs K >= 16 (the interpreter accepts it)")]


def lint_kernels(source: str) -> list[dict[str, Any]]:
    """The rules above, for every @triton.jit function of `source`, in line order."""
    try:
        tree = source_ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    language = _Language(tree)
    constants = _module_constants(tree)
    items = []
    for kernel in _kernels(tree, language):
        items += _lint_kernel(kernel, tree, lines, constants)
    unique = {(i["rule"], i["line"], i["column"], i["message"]): i for i in items}
    return sorted(unique.values(), key=lambda i: (i["line"], i["column"], i["rule"]))


def lint_finding(item: dict[str, Any], path: str | None = None, severity: str = "warning") -> DiagnosticFinding:
    """One lint item as a finding."""
    return DiagnosticFinding(
        category="lint", severity=severity, title=item["message"],
        location=SourceLocation(file=path, line=item["line"], column=item.get("column"), text=item["text"],
                                function=item["kernel"]),
        direction=DIRECTIONS.get(item["rule"], ""),
        data={"rule": item["rule"], "kernel": item["kernel"]},
    )


def lint_findings(source: str, path: str | None = None) -> list[DiagnosticFinding]:
    """lint_kernels as findings (category "lint", severity "warning")."""
    return [lint_finding(item, path) for item in lint_kernels(source)]
