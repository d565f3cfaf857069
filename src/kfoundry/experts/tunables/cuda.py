"""The CUDA half of discovery: in the CUDA source strings of a module (those given to `load_inline`, or
holding a `__global__`), #defines, int declarations, launch block sizes and literal template arguments, read by
regular expressions once the AST has found the string; and what each string asks of a block."""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass

from kfoundry import source_ast
from kfoundry.experts.tunables.python import PythonModule, dotted, int_value, triton_rule
from kfoundry.experts.tunables.tunable import CUDA_PER_THREAD, CUDA_THREADS, CUDA_TILE, CUDA_WARPS, Rule, Span, Tunable


@dataclass
class CudaFacts:
    """What one CUDA source string asks of a block, where it can be computed from its constants."""

    label: str
    max_threads: int | None  # the largest block size (threads) that evaluates to a number
    static_shared_bytes: int  # the __shared__ arrays whose sizes evaluate


_THREAD_NAMES = {"threads", "numthreads", "nthreads", "threadsperblock", "blockthreads", "blocksize", "blockdim",
                 "block", "tpb", "threadcount"}
_PER_THREAD_NAME = re.compile(r"(?:ELEM(?:ENT)?S|ITEMS|VALUES|VALS)_?PER_?THREAD|UNROLL(?:_?FACTOR)?|T[MN]")


def cuda_rule(name: str, tile_like: bool = False) -> Rule | None:
    """`tile_like`: the name is one side of a 2-D block (`dim3 block(TILE, TILE)`), not a thread count."""
    plain = name[1:] if re.match(r"k[A-Z]", name) else name  # kThreads, kBlockM
    norm = plain.replace("_", "").lower()
    if norm in _THREAD_NAMES:
        return Rule("cuda_const", CUDA_TILE) if tile_like else Rule("cuda_threads", CUDA_THREADS, pow2=False)
    if _PER_THREAD_NAME.fullmatch(plain.upper()):
        return Rule("cuda_const", CUDA_PER_THREAD)
    if norm in ("numwarps", "warps"):
        return Rule("cuda_const", CUDA_WARPS)
    rule = triton_rule(plain)
    if rule is None or rule.kind in ("warps", "stages"):
        return None
    return Rule("cuda_const", CUDA_TILE if rule.kind == "block" else rule.valid, pow2=rule.pow2)


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


class CudaText:
    """One CUDA source string of the module: its text as the source spells it, and where it lies."""

    def __init__(self, py: PythonModule, node: ast.Constant, label: str):
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
        tree = source_ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None
    return _eval_int(tree.body, env)


def _eval_int(node: ast.AST, env: dict[str, int]) -> int | None:
    if int_value(node) is not None:
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


def cuda_strings(py: PythonModule) -> list[CudaText]:
    """String constants given to load_inline (directly or by name) or holding a __global__ kernel."""
    names, picked = set(), {}
    for node in py.nodes:
        if isinstance(node, ast.Call) and dotted(node.func).endswith("load_inline"):
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
    return [CudaText(py, node, label) for node, label in ordered]


def _tile_like_names(cuda: CudaText) -> set[str]:
    return {name for _, comps in cuda.dim3s() if len(comps) >= 2 for c in comps
            for name in re.findall(r"[A-Za-z_]\w*", c)}


def cuda_tunables(cuda: CudaText) -> list[Tunable]:
    tile_like = _tile_like_names(cuda)
    found: list[Tunable] = []

    def add(name: str, rule: Rule | None, index: int, digits: str, where: str, site: str,
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


def _tie_thread_literals(cuda: CudaText, found: list[Tunable]) -> None:
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


def cuda_facts(cuda: CudaText) -> CudaFacts:
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
