"""The Python half of discovery: Triton launches, block-like constants and `triton.Config` entries found in
the module's AST, and the tile groups of the kernels that call tl.dot."""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass

from kfoundry.experts.tunables.tunable import BLOCK_1D, BLOCK_2D, GROUPS, SPLITS, STAGES, WARPS, Rule, Span, Tunable

TRITON_DEFAULT_WARPS = 4
TRITON_DEFAULT_STAGES = 3


@dataclass
class TileGroup:
    """One launch or autotune config of a kernel that calls tl.dot: what its shared memory and registers need."""

    label: str
    m: int | None
    n: int | None
    k: int | None
    warps: int = TRITON_DEFAULT_WARPS
    stages: int = TRITON_DEFAULT_STAGES
    element_bytes: int = 4
    a_copies: int = 1  # distinct left operands of the kernel's dots (fp16x3: a hi and a lo tile)
    b_copies: int = 1  # distinct right operands (an LSTM step: a weight tile per gate)
    accumulators: int = 1  # 2-D tl.zeros tiles (fp16x3: the sum, the high and the low products)


_BLOCK_NAME = re.compile(r"[XYZR]BLOCK|B(?P<b>[MNK])"
                         r"|(?:BLOCK|TILE|BLK)(?:_?SIZE)?(?:_?(?P<dim>[A-RT-Z]|ROWS?|COLS?|KV))?")
_GROUP_NAME = re.compile(r"GROUP(?:_?SIZE)?(?:_?[MNK])?")
_SPLIT_NAME = re.compile(r"SPLIT(?:_?(?:[MNK]|SIZE))?|NUM_?SPLITS?")


def triton_rule(name: str) -> Rule | None:
    low, upper = name.lower(), name.upper()
    if low in ("num_warps", "warps"):
        return Rule("warps", WARPS, "warps")
    if low in ("num_stages", "stages"):
        return Rule("stages", STAGES, "stages", pow2=False)
    if _GROUP_NAME.fullmatch(upper):
        return Rule("group", GROUPS, pow2=False)
    if _SPLIT_NAME.fullmatch(upper):
        return Rule("split", SPLITS, pow2=False)
    match = _BLOCK_NAME.fullmatch(upper)
    if match:
        dim = match.group("dim") or match.group("b") or ""
        return Rule("block", BLOCK_2D, dim) if dim in ("M", "N", "K") else Rule("block", BLOCK_1D)
    return None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def int_value(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _int_node(node: ast.AST | None) -> ast.Constant | None:
    """The int literal `node` is: `1024`, or `tl.constexpr(1024)`."""
    if isinstance(node, ast.Call) and dotted(node.func).endswith("constexpr") and len(node.args) == 1:
        node = node.args[0]
    return node if isinstance(node, ast.Constant) and int_value(node) is not None else None


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        return dotted(node.func)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    return ""


def _key(node: ast.AST) -> str | None:
    """What an expression names, for matching reads with assignments: `BLOCK`, `self.BLOCK`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def _reads(expr: ast.AST) -> set[str]:
    return {key for node in ast.walk(expr) if isinstance(getattr(node, "ctx", None), ast.Load)
            and (key := _key(node)) is not None}


@dataclass
class _Assign:
    key: str
    value: ast.expr
    scope: ast.AST
    line: int


@dataclass
class _Launch:
    call: ast.Call
    kernel: str
    scope: ast.AST


def line_starts(data: bytes) -> list[int]:
    """The byte offset at which each line of UTF-8 source starts (the AST counts columns in bytes)."""
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def node_span(starts: list[int], node: ast.AST, offset: int = 0) -> Span:
    """Where a node stands in the source's bytes, given its line_starts."""
    return Span(starts[node.lineno - 1] + node.col_offset, starts[node.end_lineno - 1] + node.end_col_offset, offset)


class PythonModule:
    """The facts of one parsed module that discovery needs: scopes, assignments, kernels, launches."""

    def __init__(self, source: str, tree: ast.Module):
        self.data = source.encode("utf-8")
        self.tree = tree
        self.line_starts = line_starts(self.data)
        self.scope_of: dict[int, ast.AST] = {}
        stack: list[tuple[ast.AST, ast.AST]] = [(tree, tree)]
        while stack:
            node, scope = stack.pop()
            for child in ast.iter_child_nodes(node):
                self.scope_of[id(child)] = scope
                stack.append((child, child if isinstance(child, _SCOPES) else scope))
        self.nodes = list(ast.walk(tree))
        self.kernels = {n.name: n for n in self.nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and any(dotted(d).rsplit(".", 1)[-1] in ("jit", "autotune", "heuristics")
                                for d in n.decorator_list)}
        self.assigns = self._assignments()
        self.assigns_by_key: dict[str, list[_Assign]] = {}
        for assign in self.assigns:
            self.assigns_by_key.setdefault(assign.key, []).append(assign)
        self.launches = self._launches()

    # positions
    def span(self, node: ast.AST, offset: int = 0) -> Span:
        return node_span(self.line_starts, node, offset)

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)

    def scope_name(self, scope: ast.AST) -> str:
        return getattr(scope, "name", "module")

    # assignments and reads
    def _assignments(self) -> list[_Assign]:
        """Every binding of a name or attribute to a value, in source order."""
        found = []
        for node in sorted((n for n in self.nodes if isinstance(n, (ast.Assign, ast.AnnAssign))),
                           key=lambda n: (n.lineno, n.col_offset)):
            if isinstance(node, ast.Assign):
                pairs = [pair for target in node.targets for pair in _pairs(target, node.value)]
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                pairs = _pairs(node.target, node.value)
            else:
                continue
            found += [_Assign(key, value, self.scope_of[id(node)], node.lineno) for key, value in pairs]
        return found

    def resolve(self, key: str, scope: ast.AST, line: int) -> ast.expr | None:
        """The value last bound to `key` before `line` in `scope`, else in the module, else (self.x) anywhere."""
        bound = self.assigns_by_key.get(key, [])
        local = [a for a in bound if a.scope is scope and a.line <= line]
        if not local and "." not in key:
            local = [a for a in bound if a.scope is self.tree]
        if not local and key.startswith("self."):
            local = bound
        return local[-1].value if local else None

    def resolve_int(self, node: ast.AST, scope: ast.AST, line: int) -> int | None:
        if int_value(node) is None and (key := _key(node)) is not None:
            node = self.resolve(key, scope, line)
        literal = _int_node(node)
        return None if literal is None else literal.value

    def closure(self, expr: ast.expr, scope: ast.AST, line: int, depth: int = 3) -> list[ast.expr]:
        """`expr` and the expressions bound to the names it reads, transitively (`grid`, `nblocks`, ...).
        Names bound to a bare int are not followed: they are constants of their own; nor are names bound to a call
        other than cdiv (a tensor, `out = torch.empty((h - 1) // 2 + 1, ...)`: its sizes are not the grid's)."""
        found = [expr]
        for key in sorted(_reads(expr)) if depth else []:
            value = self.resolve(key, scope, line)
            if isinstance(value, ast.Call) and not dotted(value.func).endswith("cdiv"):
                continue
            if value is not None and _int_node(value) is None and all(value is not f for f in found):
                found += [e for e in self.closure(value, scope, line, depth - 1) if all(e is not f for f in found)]
        return found

    # kernels and launches
    def _launches(self) -> list[_Launch]:
        launches = []
        for node in self.nodes:
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
                kernel = dotted(node.func.value).rsplit(".", 1)[-1]
                if kernel in self.kernels or any(kw.arg and triton_rule(kw.arg) for kw in node.keywords):
                    launches.append(_Launch(node, kernel, self.scope_of[id(node)]))
        return launches

    def kernel_of_config(self, config: ast.Call) -> ast.AST | None:
        for kernel in self.kernels.values():
            if any(node is config for d in kernel.decorator_list for node in ast.walk(d)):
                return kernel
        dot_kernels = [k for k in self.kernels.values() if _uses_dot(k)]
        return dot_kernels[0] if dot_kernels else None

    def grid_spans(self, launch: _Launch, value: int, kind: str) -> list[Span]:
        """Literals in the launch's grid (and what it is computed from) that spell `value` as the block it counts
        programs by: the divisor of a cdiv or of a division (`cdiv(n, 1024)`, `n // 1024`), and for a block the
        1023 of `(n + 1023) // 1024`, for a split an entry of the grid tuple (`(rows, 8)`: a program per part).
        A literal elsewhere is a size (`x.view(-1, 1024)`, the 1 of `h - 1 + 1`) and is not taken for it."""
        spans = []
        for expr in self.closure(launch.call.func.slice, launch.scope, launch.call.lineno):
            for node in ast.walk(expr):
                if isinstance(node, ast.Tuple) and kind == "split":
                    spans += [self.span(e) for e in node.elts if int_value(e) == value]
                    continue
                if isinstance(node, ast.Call) and dotted(node.func).endswith("cdiv") and len(node.args) == 2:
                    dividend, divisor = node.args
                elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Div)):
                    dividend, divisor = node.left, node.right
                else:
                    continue
                if int_value(divisor) != value:
                    continue
                spans.append(self.span(divisor))
                if kind == "block" and isinstance(dividend, ast.BinOp) and isinstance(dividend.op, ast.Add) and \
                        int_value(dividend.right) == value - 1:
                    spans.append(self.span(dividend.right, -1))
        return spans

    def used_keys(self) -> dict[int, set[str]]:
        """Per scope (by id): the names launches, grids, cdiv calls, configs and kernel bodies read."""
        used: dict[int, set[str]] = {}
        for launch in self.launches:
            exprs = [*launch.call.args, *(kw.value for kw in launch.call.keywords),
                     *self.closure(launch.call.func.slice, launch.scope, launch.call.lineno)]
            used.setdefault(id(launch.scope), set()).update(k for e in exprs for k in _reads(e))
        for node in self.nodes:
            if isinstance(node, ast.Call) and dotted(node.func).rsplit(".", 1)[-1] in ("cdiv", "Config"):
                scope = self.scope_of[id(node)]
                used.setdefault(id(scope), set()).update(k for a in node.args for k in _reads(a))
        for kernel in self.kernels.values():
            used.setdefault(id(kernel), set()).update(k for stmt in kernel.body for k in _reads(stmt))
        return used


def _pairs(target: ast.expr, value: ast.expr) -> list[tuple[str, ast.expr]]:
    if isinstance(target, (ast.Tuple, ast.List)):
        if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
            return [p for t, v in zip(target.elts, value.elts) for p in _pairs(t, v)]
        return []
    key = _key(target)
    return [(key, value)] if key else []


def _uses_dot(kernel: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and dotted(n.func).rsplit(".", 1)[-1] == "dot" for n in ast.walk(kernel))


def _dot_operands(kernel: ast.AST) -> tuple[int, int, int]:
    """(distinct left operands, distinct right operands, 2-D zero tiles) of a kernel's tl.dot calls."""
    dots = [n for n in ast.walk(kernel) if isinstance(n, ast.Call) and dotted(n.func).rsplit(".", 1)[-1] == "dot"
            and len(n.args) >= 2]
    zeros = [n for n in ast.walk(kernel) if isinstance(n, ast.Call) and dotted(n.func).rsplit(".", 1)[-1] == "zeros"
             and n.args and isinstance(n.args[0], (ast.Tuple, ast.List)) and len(n.args[0].elts) == 2]
    return (max(1, len({ast.dump(d.args[0]) for d in dots})), max(1, len({ast.dump(d.args[1]) for d in dots})),
            max(1, len(zeros)))


def _element_bytes(kernel: ast.AST | None) -> int:
    # 2 only when the kernel visibly works in half precision; fp32 otherwise (the safe estimate)
    if kernel is not None and any(isinstance(n, ast.Attribute) and n.attr in ("float16", "bfloat16")
                                  for n in ast.walk(kernel)):
        return 2
    return 4


def _make(py: PythonModule, base: str, rule: Rule, literal: ast.Constant, where: str, site: str,
          ties: list[Span] | None = None) -> Tunable | None:
    choices = rule.choices(literal.value)
    if choices is None:
        return None
    return Tunable(base, literal.value, rule.kind, choices, f"line {literal.lineno}: {where}",
                   [py.span(literal), *(ties or [])], base, site, literal.lineno)


def _launch_tunables(py: PythonModule) -> list[Tunable]:
    found = []
    for launch in py.launches:
        for kw in launch.call.keywords:
            rule = triton_rule(kw.arg) if kw.arg else None
            if rule is None or int_value(kw.value) is None:
                continue
            ties = []
            if rule.kind in ("block", "split"):
                ties = py.grid_spans(launch, kw.value.value, rule.kind)
            found.append(_make(py, kw.arg, rule, kw.value, f"launch of {launch.kernel}", launch.kernel, ties))
    return found


def _constant_tunables(py: PythonModule) -> list[Tunable]:
    used = py.used_keys()
    found = []
    for assign in py.assigns:
        name = assign.key.rsplit(".", 1)[-1]
        rule, literal = triton_rule(name), _int_node(assign.value)
        if rule is None or literal is None or assign.scope in py.kernels.values() or not _is_used(py, assign, used):
            continue
        ties = []
        if rule.kind in ("block", "split"):
            for launch in py.launches:
                arguments = [*launch.call.args, *(k.value for k in launch.call.keywords)]
                passed = any(_key(v) == assign.key for v in arguments)
                if passed and py.resolve(assign.key, launch.scope, launch.call.lineno) is assign.value:
                    ties += py.grid_spans(launch, literal.value, rule.kind)
        scope = py.scope_name(assign.scope)
        found.append(_make(py, name, rule, literal, f"{assign.key} = {literal.value} in {scope}", scope, ties))
    return found


def _is_used(py: PythonModule, assign: _Assign, used: dict[int, set[str]]) -> bool:
    if "." in assign.key:  # self.BLOCK
        return any(assign.key in keys for keys in used.values())
    if isinstance(assign.scope, ast.ClassDef):
        return any({f"self.{assign.key}", f"{assign.scope.name}.{assign.key}"} & keys for keys in used.values())
    if assign.scope is not py.tree:
        return assign.key in used.get(id(assign.scope), set())
    shadowed = {id(a.scope) for a in py.assigns_by_key[assign.key] if a.scope is not py.tree}
    return any(assign.key in keys for scope, keys in used.items() if scope not in shadowed)


def _configs(py: PythonModule) -> list[ast.Call]:
    return [n for n in py.nodes if isinstance(n, ast.Call) and dotted(n.func).rsplit(".", 1)[-1] == "Config"]


def _config_entries(config: ast.Call) -> list[tuple[str, ast.expr]]:
    """(name, value) of a triton.Config: its dict (or dict(...)) entries, then its keywords."""
    entries: list[tuple[str, ast.expr]] = []
    first = config.args[0] if config.args else next((k.value for k in config.keywords if k.arg == "kwargs"), None)
    if isinstance(first, ast.Dict):
        entries += [(k.value, v) for k, v in zip(first.keys, first.values)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    elif isinstance(first, ast.Call) and dotted(first.func) == "dict":
        entries += [(k.arg, k.value) for k in first.keywords if k.arg]
    return entries + [(k.arg, k.value) for k in config.keywords if k.arg in ("num_warps", "num_stages")]


def _config_tunables(py: PythonModule) -> list[Tunable]:
    found = []
    for i, config in enumerate(_configs(py), start=1):
        for name, value in _config_entries(config):
            rule = triton_rule(name)
            if rule is not None and int_value(value) is not None:
                found.append(_make(py, name, rule, value, f"triton.Config #{i}", f"config{i}"))
    return found


def tile_groups(py: PythonModule) -> list[TileGroup]:
    """The launches and configs of tl.dot kernels, with the M/N/K tiles, warps and stages they set."""
    groups = []
    for launch in py.launches:
        kernel = py.kernels.get(launch.kernel)
        if kernel is not None and _uses_dot(kernel):
            values = [(kw.arg, py.resolve_int(kw.value, launch.scope, launch.call.lineno))
                      for kw in launch.call.keywords if kw.arg]
            groups.append(_group(f"line {launch.call.lineno}: launch of {launch.kernel}", values, kernel))
    for i, config in enumerate(_configs(py), start=1):
        kernel = py.kernel_of_config(config)
        if kernel is not None and _uses_dot(kernel):
            values = [(name, int_value(value)) for name, value in _config_entries(config)]
            groups.append(_group(f"line {config.lineno}: triton.Config #{i}", values, kernel))
    return groups


def _group(label: str, values: list[tuple[str, int | None]], kernel: ast.AST) -> TileGroup:
    roles: dict[str, int] = {}
    for name, value in values:
        rule = triton_rule(name)
        if rule is not None and rule.role and value is not None:
            roles[rule.role] = value
    return TileGroup(label, roles.get("M"), roles.get("N"), roles.get("K"),
                     roles.get("warps", TRITON_DEFAULT_WARPS), roles.get("stages", TRITON_DEFAULT_STAGES),
                     _element_bytes(kernel), *_dot_operands(kernel))


def python_tunables(py: PythonModule) -> list[Tunable | None]:
    """Launch keywords, then constants, then config entries (None where a literal is no sensible setting)."""
    return [*_launch_tunables(py), *_constant_tunables(py), *_config_tunables(py)]
