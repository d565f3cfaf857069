"""The candidate file's definitions and names: its imports (as aliases of qualified names), its module-level
functions and its classes with their methods, which of them are Triton kernels, and what a name stands for
where it is read. Nothing here infers kinds; the kinds of module-level names (``module_env``) and of each
function's names (``Func.env``) are written by the fixed point (``fixpoint.solve``)."""

from __future__ import annotations

import ast
import builtins as _py_builtins
from dataclasses import dataclass, field

from ..allowlist import NN_NONCOMPUTE_MODULES
from .kinds import BOT, U
from .syntax import module_level
from .torch_names import nn_layer

_BUILTINS = frozenset(dir(_py_builtins))


@dataclass(eq=False)
class Func:
    """A function of the file (module level, or a method of a module-level class) and what the inference
    found about it."""

    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None
    kernel: bool
    static: bool = False
    classmeth: bool = False
    prop: bool = False
    entry: bool = False  # ModelNew.forward: its parameters are the problem's inputs
    env: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)  # kinds seen at call sites
    ret: object = BOT
    bindings: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def display(self) -> str:
        return f"{self.cls}.{self.node.name}" if self.cls else f"{self.node.name}()"

    @property
    def self_name(self) -> str | None:
        if self.cls is None or self.static:
            return None
        args = self.node.args.posonlyargs + self.node.args.args
        return args[0].arg if args else None


@dataclass
class Ctx:
    """Where an expression is read: in a function (its environment) or at module level (func is None)."""

    env: dict
    func: Func | None

    @property
    def cls(self) -> str | None:
        return self.func.cls if self.func else None


class Program:
    """What the file defines and what its names stand for. ``module_env`` holds the kinds of the module's own
    names; the fixed point rewrites it while it runs, and lookups read the current one."""

    def __init__(self, tree: ast.Module, source: str):
        self.tree = tree
        self.source = source
        self.nodes = tuple(ast.walk(tree))  # every node once, in ast.walk's order: the rules walk this, not the tree
        self.parents: dict[ast.AST, ast.AST] = {}
        for p in self.nodes:
            for c in ast.iter_child_nodes(p):
                self.parents[c] = p
        self.aliases: dict[str, str] = {}
        self.module_env: dict = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.methods: dict[str, dict[str, Func]] = {}
        self.funcs: dict[tuple[str, str], Func] = {}
        self._kernel_cache: dict[ast.AST, bool] = {}
        self._scope_cache: dict[ast.AST, tuple] = {}
        self._collect_imports()
        self._collect_defs()
        fwd = self.method("ModelNew", "forward") if "ModelNew" in self.classes else None
        if fwd is not None:
            fwd.entry = True

    # -- names --------------------------------------------------------------------------------
    def _collect_imports(self):
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        root = a.name.split(".")[0]
                        self.aliases[root] = root
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        # module-level `F = torch.nn.functional`, `mm = torch.matmul`
        for stmt in module_level(self.tree.body):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, (ast.Name, ast.Attribute)):
                qn = self.qualname(stmt.value, None)
                if qn:
                    for t in stmt.targets:
                        if isinstance(t, ast.Name):
                            self.aliases[t.id] = qn

    def is_kernel(self, fn) -> bool:
        if fn not in self._kernel_cache:
            res = False
            for d in fn.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                qn = self.qualname(target, None)
                if qn and qn.split(".")[0] == "triton" and qn.split(".")[-1] in ("jit", "autotune", "heuristics"):
                    res = True
            self._kernel_cache[fn] = res
        return self._kernel_cache[fn]

    def _collect_defs(self):
        for stmt in module_level(self.tree.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.funcs[("", stmt.name)] = Func(stmt, None, self.is_kernel(stmt))
            elif isinstance(stmt, ast.ClassDef):
                self.classes[stmt.name] = stmt
                meths = self.methods.setdefault(stmt.name, {})
                for s in module_level(stmt.body):
                    if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        decos = {self._deco_name(d) for d in s.decorator_list}
                        f = Func(s, stmt.name, self.is_kernel(s), static="staticmethod" in decos,
                                 classmeth="classmethod" in decos, prop="property" in decos)
                        meths[s.name] = f
                        self.funcs[(stmt.name, s.name)] = f

    @staticmethod
    def _deco_name(d) -> str:
        d = d.func if isinstance(d, ast.Call) else d
        if isinstance(d, ast.Name):
            return d.id
        if isinstance(d, ast.Attribute):
            return d.attr
        return ""

    def lookup(self, name: str, ctx: Ctx | None):
        if ctx is not None and ctx.func is not None and name in ctx.env:
            return ctx.env[name]
        if name in self.aliases:
            return ("alias", self.aliases[name])
        if name in self.module_env:
            return self.module_env[name]
        f = self.funcs.get(("", name))
        if f is not None:
            return ("kernel", name) if f.kernel else ("func", ("", name))
        if name in self.classes:
            return ("cls", name)
        if name in _BUILTINS:
            return ("builtin", name)
        return U

    def is_builtin(self, name: str, ctx: Ctx | None) -> bool:
        return self.lookup(name, ctx) == ("builtin", name)

    def qualname(self, node, ctx: Ctx | None) -> str | None:
        if isinstance(node, ast.Name):
            k = self.lookup(node.id, ctx)
            return k[1] if isinstance(k, tuple) and k[0] == "alias" else None
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value, ctx)
            return f"{base}.{node.attr}" if base else None
        # getattr(torch, "name") is deliberately not resolved: a name fetched that way is the dynamic
        # guard's business (tests/fixtures/guard/dyn_* rely on it)
        return None

    # -- classes ------------------------------------------------------------------------------
    def mro(self, cls: str) -> list[str]:
        out, stack = [], [cls]
        while stack:
            c = stack.pop(0)
            if c in out or c not in self.classes:
                continue
            out.append(c)
            for b in self.classes[c].bases:
                if isinstance(b, ast.Name) and b.id in self.classes:
                    stack.append(b.id)
        return out

    def method(self, cls: str, name: str) -> Func | None:
        for c in self.mro(cls):
            f = self.methods.get(c, {}).get(name)
            if f is not None:
                return f
        return None

    def nn_base(self, cls: str) -> str | None:
        """The torch.nn layer a candidate class derives from (outside the file), if it computes."""
        for c in self.mro(cls):
            for b in self.classes[c].bases:
                layer = nn_layer(self.qualname(b, None))
                if layer and layer not in NN_NONCOMPUTE_MODULES:
                    return layer
        return None

    def is_autograd_fn(self, cls: str) -> bool:
        for c in self.mro(cls):
            for b in self.classes[c].bases:
                if self.qualname(b, None) in ("torch.autograd.Function", "torch.autograd.function.Function"):
                    return True
        return False

    # -- node iteration -----------------------------------------------------------------------
    def scope_nodes(self, root) -> tuple:
        """Nodes under a function, nested non-kernel defs included, nested kernels skipped. Listed once per root:
        the fixed point asks for the same scopes in every round (the tree is never changed)."""
        nodes = self._scope_cache.get(root)
        if nodes is None:
            found, stack = [], list(ast.iter_child_nodes(root))
            while stack:
                n = stack.pop()
                found.append(n)
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and self.is_kernel(n):
                    continue
                stack.extend(ast.iter_child_nodes(n))
            nodes = self._scope_cache[root] = tuple(found)
        return nodes

    def module_nodes(self) -> tuple:
        """Nodes of the module's own scope (outside functions and classes), listed once."""
        nodes = self._scope_cache.get(self.tree)
        if nodes is None:
            found, stack = [], list(self.tree.body)
            while stack:
                n = stack.pop()
                found.append(n)
                if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                    stack.extend(ast.iter_child_nodes(n))
            nodes = self._scope_cache[self.tree] = tuple(found)
        return nodes

    # -- where nodes stand ------------------------------------------------------------------
    def kernel_nodes(self) -> set[int]:
        """ids of every node inside a Triton kernel (its body is not host code)."""
        out: set[int] = set()
        for fn in self.nodes:
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and self.is_kernel(fn):
                out.update(id(x) for x in ast.walk(fn))
        return out

    def enclosing_function(self, node):
        p = self.parents.get(node)
        while p is not None:
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return p
            p = self.parents.get(p)
        return None
