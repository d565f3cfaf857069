"""The tunable constants of a candidate, found by reading its AST, and rewriting them in place.

What is tunable:
* literal keywords of Triton launches: `kernel[grid](..., BLOCK_M=64, num_warps=4, num_stages=3)`;
* int constants bound to block/tile/group/split-like names (`BLOCK = 1024`, `BM, BN, BK = 128, 64, 32`,
  `self.BLOCK = 256`) that a launch, a grid or `triton.cdiv` reads (module constants also when a kernel does);
* the entries of `triton.Config({...}, num_warps=..., num_stages=...)`;
* in CUDA source strings (those given to `load_inline`, or holding a `__global__`): `#define NAME <int>`,
  `[const|constexpr] int NAME = <int>;`, the literal block size of `<<<grid, 256>>>` and literal template
  arguments of a launch. Regular expressions read inside the string once the AST has found it.

A literal that spells the same size elsewhere (the 1024 of `triton.cdiv(n, 1024)` beside `BLOCK=1024`, the 255
and 256 of `<<<(n + 255) / 256, 256>>>`) is rewritten together with it; a size that cannot be told apart from
another one that way is left alone. Rewrites replace digits only: the rest of the file stays byte-identical.
"""

from __future__ import annotations

import ast
import bisect
import itertools
import re
from collections import Counter
from dataclasses import dataclass, field

KINDS = ("block", "warps", "stages", "group", "split", "cuda_threads", "cuda_const")


def _powers(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(1 << i for i in range(hi.bit_length()) if lo <= 1 << i <= hi)


BLOCK_1D = _powers(16, 4096)
BLOCK_2D = _powers(16, 256)
WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5, 6)
GROUPS = (1, 2, 4, 8, 16, 32)
SPLITS = (1, 2, 4, 8, 16)
CUDA_THREADS = _powers(32, 1024)
CUDA_TILE = _powers(2, 256)
CUDA_PER_THREAD = _powers(1, 16)
CUDA_WARPS = _powers(1, 32)
TRITON_DEFAULT_WARPS = 4
TRITON_DEFAULT_STAGES = 3


@dataclass(frozen=True)
class Span:
    start: int  # byte offsets into the UTF-8 source (the AST counts columns in bytes)
    end: int
    offset: int = 0  # the literal here spells value + offset: the 255 of `(n + 255) / 256` has -1


@dataclass
class Tunable:
    """One tunable constant of a candidate."""

    name: str  # unique within the source: the spelled name, qualified by its site when it repeats
    value: int
    kind: str  # one of KINDS
    choices: list[int]  # the valid values, the current one included
    where: str  # e.g. "line 42: launch of _matmul_kernel"
    spans: list[Span] = field(default_factory=list, repr=False)  # the first is the constant itself
    base: str = field(default="", repr=False)  # the name as the source spells it
    site: str = field(default="", repr=False)  # the kernel, scope, config or CUDA string it belongs to
    line: int = field(default=0, repr=False)


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


@dataclass
class CudaFacts:
    """What one CUDA source string asks of a block, where it can be computed from its constants."""

    label: str
    max_threads: int | None  # the largest block size (threads) that evaluates to a number
    static_shared_bytes: int  # the __shared__ arrays whose sizes evaluate


@dataclass
class Discovery:
    tunables: list[Tunable]
    tile_groups: list[TileGroup]
    cuda: list[CudaFacts]


@dataclass(frozen=True)
class _Rule:
    kind: str
    valid: tuple[int, ...]
    role: str = ""  # M, N or K for a 2-D tile dim of tl.dot, else warps / stages
    pow2: bool = True

    def choices(self, value: int) -> list[int] | None:
        """The choices around `value`, or None when `value` itself is not a sensible setting of this kind."""
        if value < 1 or (self.pow2 and value & (value - 1)):
            return None
        if self.kind == "cuda_threads" and (value % 32 or value > 1024):
            return None
        return sorted(set(self.valid) | {value})


_BLOCK_NAME = re.compile(r"[XYZR]BLOCK|B(?P<b>[MNK])"
                         r"|(?:BLOCK|TILE|BLK)(?:_?SIZE)?(?:_?(?P<dim>[A-RT-Z]|ROWS?|COLS?|KV))?")
_GROUP_NAME = re.compile(r"GROUP(?:_?SIZE)?(?:_?[MNK])?")
_SPLIT_NAME = re.compile(r"SPLIT(?:_?(?:[MNK]|SIZE))?|NUM_?SPLITS?")
_THREAD_NAMES = {"threads", "numthreads", "nthreads", "threadsperblock", "blockthreads", "blocksize", "blockdim",
                 "block", "tpb", "threadcount"}
_PER_THREAD_NAME = re.compile(r"(?:ELEM(?:ENT)?S|ITEMS|VALUES|VALS)_?PER_?THREAD|UNROLL(?:_?FACTOR)?|T[MN]")


def triton_rule(name: str) -> _Rule | None:
    low, upper = name.lower(), name.upper()
    if low in ("num_warps", "warps"):
        return _Rule("warps", WARPS, "warps")
    if low in ("num_stages", "stages"):
        return _Rule("stages", STAGES, "stages", pow2=False)
    if _GROUP_NAME.fullmatch(upper):
        return _Rule("group", GROUPS, pow2=False)
    if _SPLIT_NAME.fullmatch(upper):
        return _Rule("split", SPLITS, pow2=False)
    match = _BLOCK_NAME.fullmatch(upper)
    if match:
        dim = match.group("dim") or match.group("b") or ""
        return _Rule("block", BLOCK_2D, dim) if dim in ("M", "N", "K") else _Rule("block", BLOCK_1D)
    return None


def cuda_rule(name: str, tile_like: bool = False) -> _Rule | None:
    """`tile_like`: the name is one side of a 2-D block (`dim3 block(TILE, TILE)`), not a thread count."""
    plain = name[1:] if re.match(r"k[A-Z]", name) else name  # kThreads, kBlockM
    norm = plain.replace("_", "").lower()
    if norm in _THREAD_NAMES:
        return _Rule("cuda_const", CUDA_TILE) if tile_like else _Rule("cuda_threads", CUDA_THREADS, pow2=False)
    if _PER_THREAD_NAME.fullmatch(plain.upper()):
        return _Rule("cuda_const", CUDA_PER_THREAD)
    if norm in ("numwarps", "warps"):
        return _Rule("cuda_const", CUDA_WARPS)
    rule = triton_rule(plain)
    if rule is None or rule.kind in ("warps", "stages"):
        return None
    return _Rule("cuda_const", CUDA_TILE if rule.kind == "block" else rule.valid, pow2=rule.pow2)


# ---------------------------------------------------------------------------------------------------- Python side

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _literal(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _int_node(node: ast.AST | None) -> ast.Constant | None:
    """The int literal `node` is: `1024`, or `tl.constexpr(1024)`."""
    if isinstance(node, ast.Call) and _dotted(node.func).endswith("constexpr") and len(node.args) == 1:
        node = node.args[0]
    return node if isinstance(node, ast.Constant) and _literal(node) is not None else None


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
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


class _Python:
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
                        and any(_dotted(d).rsplit(".", 1)[-1] in ("jit", "autotune", "heuristics")
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
        if _literal(node) is None and (key := _key(node)) is not None:
            node = self.resolve(key, scope, line)
        literal = _int_node(node)
        return None if literal is None else literal.value

    def closure(self, expr: ast.expr, scope: ast.AST, line: int, depth: int = 3) -> list[ast.expr]:
        """`expr` and the expressions bound to the names it reads, transitively (`grid`, `nblocks`, ...).
        Names bound to a bare int are not followed: they are constants of their own."""
        found = [expr]
        for key in sorted(_reads(expr)) if depth else []:
            value = self.resolve(key, scope, line)
            if value is not None and _int_node(value) is None and all(value is not f for f in found):
                found += [e for e in self.closure(value, scope, line, depth - 1) if all(e is not f for f in found)]
        return found

    # kernels and launches
    def _launches(self) -> list[_Launch]:
        launches = []
        for node in self.nodes:
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
                kernel = _dotted(node.func.value).rsplit(".", 1)[-1]
                if kernel in self.kernels or any(kw.arg and triton_rule(kw.arg) for kw in node.keywords):
                    launches.append(_Launch(node, kernel, self.scope_of[id(node)]))
        return launches

    def kernel_of_config(self, config: ast.Call) -> ast.AST | None:
        for kernel in self.kernels.values():
            if any(node is config for d in kernel.decorator_list for node in ast.walk(d)):
                return kernel
        dot_kernels = [k for k in self.kernels.values() if _uses_dot(k)]
        return dot_kernels[0] if dot_kernels else None

    def grid_spans(self, launch: _Launch, value: int, with_ceil: bool) -> list[Span]:
        """Literals in the launch's grid (and what it is computed from) that spell `value` as a size: operands of
        arithmetic, of cdiv or of the grid tuple (`cdiv(n, 1024)`, `n // 1024`), and with `with_ceil` the 1023 of
        `(n + 1023) // 1024`. A literal elsewhere (`x.view(-1, 1024)`) is not taken for the block size."""
        spans = []
        for expr in self.closure(launch.call.func.slice, launch.scope, launch.call.lineno):
            for node in ast.walk(expr):
                if isinstance(node, ast.BinOp):
                    operands = [node.left, node.right]
                    if with_ceil and isinstance(node.op, ast.Add) and _literal(node.right) == value - 1:
                        spans.append(self.span(node.right, -1))
                elif isinstance(node, ast.Call) and _dotted(node.func).endswith("cdiv"):
                    operands = node.args
                elif isinstance(node, ast.Tuple):
                    operands = node.elts
                else:
                    continue
                spans += [self.span(o) for o in operands if _literal(o) == value]
        return spans

    def used_keys(self) -> dict[int, set[str]]:
        """Per scope (by id): the names launches, grids, cdiv calls, configs and kernel bodies read."""
        used: dict[int, set[str]] = {}
        for launch in self.launches:
            exprs = [*launch.call.args, *(kw.value for kw in launch.call.keywords),
                     *self.closure(launch.call.func.slice, launch.scope, launch.call.lineno)]
            used.setdefault(id(launch.scope), set()).update(k for e in exprs for k in _reads(e))
        for node in self.nodes:
            if isinstance(node, ast.Call) and _dotted(node.func).rsplit(".", 1)[-1] in ("cdiv", "Config"):
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
    return any(isinstance(n, ast.Call) and _dotted(n.func).rsplit(".", 1)[-1] == "dot" for n in ast.walk(kernel))


def _element_bytes(kernel: ast.AST | None) -> int:
    # 2 only when the kernel visibly works in half precision; fp32 otherwise (the safe estimate)
    if kernel is not None and any(isinstance(n, ast.Attribute) and n.attr in ("float16", "bfloat16")
                                  for n in ast.walk(kernel)):
        return 2
    return 4


def _make(py: _Python, base: str, rule: _Rule, literal: ast.Constant, where: str, site: str,
          ties: list[Span] | None = None) -> Tunable | None:
    choices = rule.choices(literal.value)
    if choices is None:
        return None
    return Tunable(base, literal.value, rule.kind, choices, f"line {literal.lineno}: {where}",
                   [py.span(literal), *(ties or [])], base, site, literal.lineno)


def _launch_tunables(py: _Python) -> list[Tunable]:
    found = []
    for launch in py.launches:
        for kw in launch.call.keywords:
            rule = triton_rule(kw.arg) if kw.arg else None
            if rule is None or _literal(kw.value) is None:
                continue
            ties = []
            if rule.kind in ("block", "split"):
                ties = py.grid_spans(launch, kw.value.value, with_ceil=rule.kind == "block")
            found.append(_make(py, kw.arg, rule, kw.value, f"launch of {launch.kernel}", launch.kernel, ties))
    return found


def _constant_tunables(py: _Python) -> list[Tunable]:
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
                    ties += py.grid_spans(launch, literal.value, with_ceil=rule.kind == "block")
        scope = py.scope_name(assign.scope)
        found.append(_make(py, name, rule, literal, f"{assign.key} = {literal.value} in {scope}", scope, ties))
    return found


def _is_used(py: _Python, assign: _Assign, used: dict[int, set[str]]) -> bool:
    if "." in assign.key:  # self.BLOCK
        return any(assign.key in keys for keys in used.values())
    if isinstance(assign.scope, ast.ClassDef):
        return any({f"self.{assign.key}", f"{assign.scope.name}.{assign.key}"} & keys for keys in used.values())
    if assign.scope is not py.tree:
        return assign.key in used.get(id(assign.scope), set())
    shadowed = {id(a.scope) for a in py.assigns_by_key[assign.key] if a.scope is not py.tree}
    return any(assign.key in keys for scope, keys in used.items() if scope not in shadowed)


def _configs(py: _Python) -> list[ast.Call]:
    return [n for n in py.nodes if isinstance(n, ast.Call) and _dotted(n.func).rsplit(".", 1)[-1] == "Config"]


def _config_entries(config: ast.Call) -> list[tuple[str, ast.expr]]:
    """(name, value) of a triton.Config: its dict (or dict(...)) entries, then its keywords."""
    entries: list[tuple[str, ast.expr]] = []
    first = config.args[0] if config.args else next((k.value for k in config.keywords if k.arg == "kwargs"), None)
    if isinstance(first, ast.Dict):
        entries += [(k.value, v) for k, v in zip(first.keys, first.values)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    elif isinstance(first, ast.Call) and _dotted(first.func) == "dict":
        entries += [(k.arg, k.value) for k in first.keywords if k.arg]
    return entries + [(k.arg, k.value) for k in config.keywords if k.arg in ("num_warps", "num_stages")]


def _config_tunables(py: _Python) -> list[Tunable]:
    found = []
    for i, config in enumerate(_configs(py), start=1):
        for name, value in _config_entries(config):
            rule = triton_rule(name)
            if rule is not None and _literal(value) is not None:
                found.append(_make(py, name, rule, value, f"triton.Config #{i}", f"config{i}"))
    return found


def _tile_groups(py: _Python) -> list[TileGroup]:
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
            values = [(name, _literal(value)) for name, value in _config_entries(config)]
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
                     _element_bytes(kernel))


# ---------------------------------------------------------------------------------------------------- CUDA side

_INT = r"\(?\s*(\d+)[uUlL]*\s*\)?"
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+?)[ \t]*(?://[^\n]*)?$", re.MULTILINE)
_DECL = re.compile(r"\b(?:(?:static|constexpr|const|__device__|__constant__)\s+)*(?:unsigned\s+|signed\s+)?"
                   r"(?:int|long|unsigned|size_t|int32_t|int64_t|uint32_t|uint64_t)\s+([A-Za-z_]\w*)\s*=\s*"
                   r"([^;{}]+?)\s*;")
_LAUNCH = re.compile(r"([A-Za-z_]\w*)\s*(?:<([^<>;]*)>)?\s*<<<(.*?)>>>", re.DOTALL)
_TEMPLATE = re.compile(r"template\s*<([^<>]*)>\s*__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
                       r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(")
_TEMPLATE_PARAM = re.compile(r"\s*(?:const\s+)?(?:unsigned\s+)?(?:int|long|size_t|unsigned)\s+([A-Za-z_]\w*)"
                             r"\s*(?:=.*)?")
_DIM3 = re.compile(r"\bdim3\s*([A-Za-z_]\w*)?\s*[({]([^;{}]*?)[)}]")
_SHARED = re.compile(r"(?<!extern\s)\b__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([\w:]+(?:\s+[\w:]+)*?)\s+"
                     r"([A-Za-z_]\w*)\s*((?:\[[^\]]+\]\s*)+);")
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\(\s*(\d+)")
_TYPE_BYTES = {"double": 8, "long": 8, "int64_t": 8, "float2": 8, "float4": 16, "int4": 16, "half": 2, "__half": 2,
               "__nv_bfloat16": 2, "short": 2, "half2": 4, "__half2": 4, "char": 1, "int8_t": 1, "uint8_t": 1}


class _CudaText:
    """One CUDA source string of the module: its text as the source spells it, and where it lies."""

    def __init__(self, py: _Python, node: ast.Constant, label: str):
        self.py, self.label = py, label
        self.start = py.span(node).start
        self.text = py.data[self.start:py.span(node).end].decode("utf-8")

    def span(self, index: int, length: int, offset: int = 0) -> Span:
        start = self.start + len(self.text[:index].encode("utf-8"))
        return Span(start, start + length, offset)

    def line(self, index: int) -> int:
        return self.py.line_of(self.span(index, 0).start)

    def definitions(self) -> list[tuple[re.Match, str, str]]:
        """#defines and int declarations in order: (match, name, expression)."""
        found = [(m, m.group(1), m.group(2)) for pattern in (_DEFINE, _DECL) for m in pattern.finditer(self.text)]
        return sorted(found, key=lambda d: d[0].start())

    def env(self) -> dict[str, int]:
        env: dict[str, int] = {}
        for _, name, expr in self.definitions():
            value = _c_eval(expr, env)
            if value is not None:
                env[name] = value
        return env

    def dim3s(self) -> list[tuple[str | None, list[str]]]:
        return [(m.group(1), _split_args(m.group(2))) for m in _DIM3.finditer(self.text)]

    def launches(self) -> list[tuple[re.Match, list[tuple[int, str]]]]:
        """Each `kernel<targs><<<args>>>` and its arguments as (index in the text, text)."""
        return [(m, _split_positions(m.group(3), m.start(3))) for m in _LAUNCH.finditer(self.text)]

    def search_regions(self, expr: str, before: int) -> list[tuple[int, str]]:
        """Where a grid expression and the declarations of the names it reads lie, as (index, text)."""
        regions = []
        for name in set(re.findall(r"[A-Za-z_]\w*", expr)):
            found = list(re.finditer(rf"\b{name}\s*=\s*([^;=][^;]*);|\bdim3\s+{name}\s*[({{]([^;]*)[)}}]\s*;",
                                     self.text[:before]))
            if found:
                group = 1 if found[-1].group(1) is not None else 2
                regions.append((found[-1].start(group), found[-1].group(group)))
        return regions

    def literal_spans(self, regions: list[tuple[int, str]], value: int, with_ceil: bool) -> list[Span]:
        spans = []
        for index, text in regions:
            for m in re.finditer(r"\b(\d+)[uUlL]*\b", text):
                number = int(m.group(1))
                if number == value:
                    spans.append(self.span(index + m.start(1), len(m.group(1))))
                elif with_ceil and number == value - 1 and re.search(r"\+\s*$", text[:m.start()]):
                    spans.append(self.span(index + m.start(1), len(m.group(1)), -1))
        return spans


def _split_positions(text: str, base: int) -> list[tuple[int, str]]:
    """Split at top-level commas: [(index of the part in the whole text, part)]."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append((base + start, text[start:i]))
            start = i + 1
    parts.append((base + start, text[start:]))
    return parts


def _split_args(text: str) -> list[str]:
    return [part.strip() for _, part in _split_positions(text, 0)]


def _c_eval(expr: str, env: dict[str, int]) -> int | None:
    """An integer C constant expression of + - * / % over ints and known names; None when it is anything else."""
    expr = re.sub(r"\b(\d+)[uUlL]+\b", r"\1", expr).strip()
    if not expr or not re.fullmatch(r"[\w\s+\-*/%()]+", expr):
        return None
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None
    return _eval_int(tree.body, env)


def _eval_int(node: ast.AST, env: dict[str, int]) -> int | None:
    if _literal(node) is not None:
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _eval_int(node.operand, env)
        return None if inner is None else -inner
    if not isinstance(node, ast.BinOp):
        return None
    left, right = _eval_int(node.left, env), _eval_int(node.right, env)
    if left is None or right is None:
        return None
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right != 0:
        quotient = abs(left) // abs(right) * (1 if (left >= 0) == (right > 0) else -1)  # C truncates
        return quotient if not isinstance(node.op, ast.Mod) else left - quotient * right
    return None


def _cuda_strings(py: _Python) -> list[_CudaText]:
    """String constants given to load_inline (directly or by name) or holding a __global__ kernel."""
    names, picked = set(), {}
    for node in py.nodes:
        if isinstance(node, ast.Call) and _dotted(node.func).endswith("load_inline"):
            for arg in [*node.args, *(kw.value for kw in node.keywords)]:
                for inner in ast.walk(arg):
                    if isinstance(inner, ast.Name):
                        names.add(inner.id)
                    elif isinstance(inner, ast.Constant) and isinstance(inner.value, str) and "\n" in inner.value:
                        picked.setdefault(id(inner), (inner, f"the string at line {inner.lineno}"))
    for assign in py.assigns:
        if assign.key in names and isinstance(assign.value, ast.Constant) and isinstance(assign.value.value, str):
            picked.setdefault(id(assign.value), (assign.value, assign.key))
    docstrings = {id(n.value) for n in py.nodes if isinstance(n, ast.Expr)}
    for node in py.nodes:
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value
                and id(node) not in docstrings):
            label = next((a.key for a in py.assigns if a.value is node), f"the string at line {node.lineno}")
            picked.setdefault(id(node), (node, label))
    ordered = sorted(picked.values(), key=lambda p: (p[0].lineno, p[0].col_offset))
    return [_CudaText(py, node, label) for node, label in ordered]


def _tile_like_names(cuda: _CudaText) -> set[str]:
    return {name for _, comps in cuda.dim3s() if len(comps) >= 2 for c in comps
            for name in re.findall(r"[A-Za-z_]\w*", c)}


def _cuda_tunables(cuda: _CudaText) -> list[Tunable]:
    tile_like = _tile_like_names(cuda)
    found: list[Tunable] = []

    def add(name: str, rule: _Rule | None, index: int, digits: str, where: str, site: str,
            ties: list[Span] | None = None) -> Tunable | None:
        choices = rule.choices(int(digits)) if rule else None
        if choices is None:
            return None
        line = cuda.line(index)
        tunable = Tunable(name, int(digits), rule.kind, choices, f"line {line}: {where}",
                          [cuda.span(index, len(digits)), *(ties or [])], name, site, line)
        found.append(tunable)
        return tunable

    by_name: dict[str, list[Tunable]] = {}
    for match, name, expr in cuda.definitions():
        literal = re.fullmatch(_INT, expr)
        if literal:
            what = f"#define {name}" if match.re is _DEFINE else f"{name} = {literal.group(1)}"
            tunable = add(name, cuda_rule(name, name in tile_like), match.start(2) + literal.start(1),
                          literal.group(1), f"{what} in {cuda.label}", cuda.label)
            if tunable:
                by_name.setdefault(name, []).append(tunable)
    templates = {m.group(2): [p.group(1) if (p := _TEMPLATE_PARAM.fullmatch(part)) else None
                              for part in _split_args(m.group(1))] for m in _TEMPLATE.finditer(cuda.text)}
    for match, args in cuda.launches():
        if len(args) < 2:
            continue
        kernel, (grid_index, grid), (block_index, block) = match.group(1), args[0], args[1]
        regions = [(grid_index, grid), *cuda.search_regions(grid, match.start())]
        block_literal = re.fullmatch(r"\s*(\d+)\s*", block)
        consumed = False
        template_args = _split_positions(match.group(2) or "", match.start(2))
        for (index, arg), param in zip(template_args, templates.get(kernel, [])):
            literal = re.fullmatch(r"\s*(\d+)\s*", arg)
            if not literal:
                continue
            if param is None:  # not an int parameter we can name: its size is not tunable, nor its block's
                consumed |= bool(block_literal) and block_literal.group(1) == literal.group(1)
                continue
            value, rule = int(literal.group(1)), cuda_rule(param, param in tile_like)
            # kernel<256><<<(n + 255) / 256, 256>>>: one size, spelled three times
            is_block = bool(block_literal) and int(block_literal.group(1)) == value
            consumed |= is_block
            ties = [cuda.span(block_index + m.start(), len(m.group())) for m in re.finditer(rf"\b{value}\b", block)]
            ties += cuda.literal_spans(regions, value, is_block or (rule is not None and rule.kind == "cuda_threads"))
            add(param, rule, index + literal.start(1), literal.group(1),
                f"template argument {param} of the launch of {kernel} in {cuda.label}", kernel, ties)
        if block_literal and not consumed:
            value = int(block_literal.group(1))
            add("threads", cuda_rule("threads"), block_index + block_literal.start(1), block_literal.group(1),
                f"block size of the launch of {kernel} in {cuda.label}", kernel,
                cuda.literal_spans(regions, value, True))
        for name in set(re.findall(r"[A-Za-z_]\w*", block)):
            for tunable in by_name.get(name, []):
                if tunable.kind == "cuda_threads":
                    tunable.spans += cuda.literal_spans(regions, tunable.value, True)
    _tie_thread_literals(cuda, found)
    return found


def _tie_thread_literals(cuda: _CudaText, found: list[Tunable]) -> None:
    """`__launch_bounds__(256)` and `__shared__ float s[256]` spell the block size of the one 256-thread launch."""
    values = Counter(t.value for t in found if t.kind == "cuda_threads")
    for tunable in found:
        if tunable.kind != "cuda_threads" or values[tunable.value] > 1:
            continue
        for m in _LAUNCH_BOUNDS.finditer(cuda.text):
            if int(m.group(1)) == tunable.value:
                tunable.spans.append(cuda.span(m.start(1), len(m.group(1))))
        for m in _SHARED.finditer(cuda.text):
            for dim in re.finditer(r"\[\s*(\d+)\s*\]", m.group(3)):
                if int(dim.group(1)) == tunable.value:
                    tunable.spans.append(cuda.span(m.start(3) + dim.start(1), len(dim.group(1))))


def _cuda_facts(cuda: _CudaText) -> CudaFacts:
    env = cuda.env()
    dim3s = cuda.dim3s()
    threads = [_product(comps, env) for _, comps in dim3s]
    named = {name for name, _ in dim3s if name}
    for _, args in cuda.launches():
        block = args[1][1].strip() if len(args) > 1 else ""
        if block and block not in named and not block.startswith("dim3"):
            threads.append(_c_eval(block, env))
    shared = 0
    for m in _SHARED.finditer(cuda.text):
        dims = [_c_eval(d, env) for d in re.findall(r"\[([^\]]+)\]", m.group(3))]
        if all(d is not None for d in dims):
            shared += _product([str(d) for d in dims], {}) * _TYPE_BYTES.get(m.group(1).split()[-1], 4)
    known = [t for t in threads if t is not None]
    return CudaFacts(cuda.label, max(known) if known else None, shared)


def _product(parts: list[str], env: dict[str, int]) -> int | None:
    result = 1
    for part in parts:
        value = _c_eval(part, env)
        if value is None:
            return None
        result *= value
    return result


# ---------------------------------------------------------------------------------------------------- together


def discover(source: str) -> Discovery | None:
    """Everything tunable in `source`, and what the limits are checked on; None when it does not parse."""
    if not isinstance(source, str):
        return None
    try:
        return _discover(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # does not parse, or nests beyond the stack
        return None


def _discover(source: str) -> Discovery:
    py = _Python(source, ast.parse(source))
    cuda = _cuda_strings(py)
    found = [*_launch_tunables(py), *_constant_tunables(py), *_config_tunables(py)]
    found += [t for text in cuda for t in _cuda_tunables(text)]
    return Discovery(_finish([t for t in found if t is not None]), _tile_groups(py), [_cuda_facts(c) for c in cuda])


def find_tunables(source: str) -> list[Tunable]:
    """The tunable constants of a candidate in source order; [] when there are none or it does not parse."""
    found = discover(source)
    return found.tunables if found else []


def _finish(found: list[Tunable]) -> list[Tunable]:
    """Drop tunables whose rewrites overlap another's (ambiguous ties), order by position, make names unique."""
    for tunable in found:
        tunable.spans = [tunable.spans[0], *sorted(set(tunable.spans[1:]) - {tunable.spans[0]}, key=_span_key)]
    claims = Counter((s.start, s.end) for t in found for s in t.spans)
    kept = sorted((t for t in found if all(claims[(s.start, s.end)] == 1 for s in t.spans)),
                  key=lambda t: t.spans[0].start)
    counts = Counter(t.base for t in kept)
    for tunable in kept:
        tunable.name = tunable.base if counts[tunable.base] == 1 else f"{tunable.base}@{tunable.site}"
    counts = Counter(t.name for t in kept)
    for tunable in kept:
        if counts[tunable.name] > 1:
            tunable.name = f"{tunable.base}@line{tunable.line}"
    seen: Counter[str] = Counter()
    for tunable in kept:
        seen[tunable.name] += 1
        if seen[tunable.name] > 1:  # two on one line
            tunable.name = f"{tunable.name}#{seen[tunable.name]}"
    return kept


def _span_key(span: Span) -> tuple[int, int]:
    return span.start, span.end


def apply_values(source: str, tunables: list[Tunable], values: dict[str, int]) -> str | None:
    """`source` with the named tunables set to new values, only their digits rewritten; None if rewrites overlap."""
    edits = sorted((s.start, s.end, str(values[t.name] + s.offset).encode())
                   for t in tunables if t.name in values for s in t.spans)
    if any(later[0] < earlier[1] for earlier, later in itertools.pairwise(edits)):
        return None
    data = bytearray(source.encode("utf-8"))
    for start, end, text in reversed(edits):
        data[start:end] = text
    return data.decode("utf-8")
