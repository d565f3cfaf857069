"""Kind inference over the syntax tree: what kind an expression has (tensor, scalar, an nn layer, one of the
candidate's functions or classes ...), read from the file's names and from the environments the fixed point
settled (``fixpoint.solve``), and which of the file's functions a call runs."""

from __future__ import annotations

import ast

from ..allowlist import NN_NONCOMPUTE_MODULES, TORCH_FUNCTIONS
from .kinds import BOT, S, T, U, binop, elem, join, nontensor
from .program import Ctx, Func, Program
from .syntax import str_const
from .torch_names import (LIKELY_TENSOR_COMPUTE, NN_CALL_METHODS, SCALAR_MODULES, TENSOR_ONLY_METHODS,
                          TENSOR_QUERY_METHODS, TENSOR_SCALAR_ATTRS, TENSOR_VIEW_ATTRS, TORCH_QUERY_FUNCS,
                          nn_layer, torch_compute, weightish)


class Inference:
    """Answers "what kind is this expression" in a context (``Ctx``); the environments it reads are the ones
    ``fixpoint.solve`` writes."""

    def __init__(self, program: Program):
        self.program = program
        # per class of the file: the kinds of its attributes (set on self or in the class body), and the
        # attributes that hold containers of computing nn layers (their layer)
        self.class_attrs: dict[str, dict[str, object]] = {}
        self.containers: dict[str, dict[str, str]] = {}
        self._memo: dict | None = None  # switched on after solve(): envs no longer change
        self._func_of: dict | None = None

    def ctx(self, f: Func | None) -> Ctx:
        return Ctx(f.env if f is not None else self.program.module_env, f)

    def ctx_at(self, node) -> Ctx:
        """The inference context of the function the node is in (the module's outside functions)."""
        if self._func_of is None:
            self._func_of = {f.node: f for f in self.program.funcs.values() if not f.kernel}
        p = self.program.parents.get(node)
        while p is not None:
            f = self._func_of.get(p)
            if f is not None:
                return self.ctx(f)
            p = self.program.parents.get(p)
        return self.ctx(None)

    def memoize(self):
        """The fixed point is reached: from now on every kind asked for is remembered."""
        self._memo = {}

    # -- members of the file's classes ---------------------------------------------------------
    def member_kind(self, cls: str, attr: str, bound: bool):
        f = self.program.method(cls, attr)
        if f is not None:
            if f.prop and bound:
                return f.ret
            return ("method", cls, attr, bound)
        if not bound and attr == "apply" and self.program.is_autograd_fn(cls):
            return ("apply", cls)
        for c in self.program.mro(cls):
            if attr in self.containers.get(c, {}):
                return ("nnlist", self.containers[c][attr])
            if attr in self.class_attrs.get(c, {}):
                return self.class_attrs[c][attr]
        if bound and self.program.nn_base(cls) and weightish(attr):
            return T
        return U

    # -- calls and targets --------------------------------------------------------------------
    def callee_funcs(self, fk) -> list[tuple[Func, bool]]:
        if not isinstance(fk, tuple):
            return []
        tag = fk[0]
        f = None
        drop = True
        if tag == "func":
            f, drop = self.program.funcs.get(fk[1]), False
        elif tag == "method":
            f = self.program.method(fk[1], fk[2])
            if f is not None:
                drop = False if f.static else (True if f.classmeth else fk[3])
        elif tag == "cls":
            f = self.program.method(fk[1], "__init__")
        elif tag == "inst":
            f = self.program.method(fk[1], "__call__") or self.program.method(fk[1], "forward")
        elif tag == "apply":
            f = self.program.method(fk[1], "forward")
        if f is None or f.kernel:
            return []
        return [(f, drop)]

    def call_targets(self, call: ast.Call, ctx: Ctx) -> list[tuple[Func, bool]]:
        return self.callee_funcs(self.eval(call.func, ctx))

    # -- evaluation ---------------------------------------------------------------------------
    def eval(self, node, ctx: Ctx):
        """The kind of an expression (memoized per function once the fixed point is reached)."""
        memo = self._memo
        if memo is None:
            return self._eval(node, ctx)
        key = (id(node), id(ctx.env))
        if key not in memo:
            memo[key] = self._eval(node, ctx)
        return memo[key]

    def _eval(self, node, ctx: Ctx):
        if isinstance(node, ast.Constant):
            return S
        if isinstance(node, ast.Name):
            return self.program.lookup(node.id, ctx)
        if isinstance(node, ast.Attribute):
            qn = self.program.qualname(node, ctx)
            if qn:
                return ("alias", qn)
            return self.attr_kind(self.eval(node.value, ctx), node.attr)
        if isinstance(node, ast.Call):
            return self.call_kind(node, ctx)
        if isinstance(node, ast.Subscript):
            vk = self.eval(node.value, ctx)
            if vk == T:
                return T
            if isinstance(vk, tuple):
                if vk[0] == "tuple":
                    idx = node.slice
                    if (isinstance(idx, ast.Constant) and isinstance(idx.value, int)
                            and -len(vk[1]) <= idx.value < len(vk[1])):
                        k = vk[1][idx.value]
                        # callables kept in containers are not followed (left to the dynamic guard)
                        return U if isinstance(k, tuple) and k[0] != "tuple" else k
                    if isinstance(idx, ast.Slice):
                        return S if all(nontensor(e) for e in vk[1]) else U
                    return elem(vk)
                if vk[0] in ("nnlist",) or (vk[0] == "nn" and vk[1] == "Sequential"):
                    return elem(vk)
                if vk[0] == "kernel":
                    return vk
                if vk[0] == "alias":
                    return U
            if vk == S:
                return S
            return BOT if vk == BOT else U
        if isinstance(node, ast.BinOp):
            return binop(self.eval(node.left, ctx), self.eval(node.right, ctx))
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return S
            k = self.eval(node.operand, ctx)
            return T if k == T else (S if nontensor(k) else k if k == BOT else U)
        if isinstance(node, ast.BoolOp):
            out = BOT
            for v in node.values:
                out = join(out, self.eval(v, ctx))
            return out
        if isinstance(node, ast.IfExp):
            return join(self.eval(node.body, ctx), self.eval(node.orelse, ctx))
        if isinstance(node, ast.Compare):
            kinds = [self.eval(x, ctx) for x in [node.left, *node.comparators]]
            if T in kinds and any(isinstance(op, (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE))
                                  for op in node.ops):
                return T
            return BOT if BOT in kinds else S
        if isinstance(node, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in node.elts) or len(node.elts) > 16:
                return S if all(nontensor(self.eval(getattr(e, "value", e), ctx)) for e in node.elts) else U
            return ("tuple", tuple(self.eval(e, ctx) for e in node.elts))
        if isinstance(node, (ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                             ast.JoinedStr, ast.Lambda, ast.FormattedValue)):
            return S
        if isinstance(node, ast.NamedExpr):
            return self.eval(node.value, ctx)
        return U

    def attr_kind(self, rk, attr: str):
        if rk == T:
            if attr in TENSOR_SCALAR_ATTRS:
                return S
            if attr in TENSOR_VIEW_ATTRS:
                return T
            return U
        if rk == S:
            return S
        if rk == BOT:
            return BOT
        if isinstance(rk, tuple):
            tag = rk[0]
            if tag in ("self", "inst"):
                return self.member_kind(rk[1], attr, True)
            if tag == "cls":
                return self.member_kind(rk[1], attr, False)
            if tag == "super":
                for c in self.program.mro(rk[1])[1:]:
                    if attr in self.program.methods.get(c, {}):
                        return ("method", c, attr, True)
                return U
            if tag == "nn":
                if weightish(attr):
                    return T
                return U
            if tag == "ext":
                return ("extfn",)
            if tag == "alias":
                return ("alias", f"{rk[1]}.{attr}")
        return U

    def call_kind(self, node: ast.Call, ctx: Ctx):
        func = node.func
        if isinstance(func, ast.Name) and self.program.is_builtin(func.id, ctx):
            return self._builtin_kind(func.id, node, ctx)
        qn = self.program.qualname(func, ctx)
        if qn:
            return self._qual_call_kind(qn, node, ctx)
        if isinstance(func, ast.Attribute):
            rk = self.eval(func.value, ctx)
            name = func.attr
            if rk == T:
                if name in TENSOR_QUERY_METHODS:
                    return S
                return U if name == "type" else T
            if rk == S:
                return S
            if rk in (U, BOT):
                if name in TENSOR_QUERY_METHODS:
                    return S
                if name in TENSOR_ONLY_METHODS or name in LIKELY_TENSOR_COMPUTE:
                    return T
                return BOT if rk == BOT else U
            if isinstance(rk, tuple) and rk[0] == "nn" and name in NN_CALL_METHODS:
                return T
            if isinstance(rk, tuple) and rk[0] == "tuple":
                return U
        return self._callee_kind(self.eval(func, ctx), node, ctx)

    def _callee_kind(self, fk, node, ctx):
        if not isinstance(fk, tuple):
            return BOT if fk == BOT else U
        tag = fk[0]
        if tag in ("func", "method", "apply"):
            targets = self.callee_funcs(fk)
            return targets[0][0].ret if targets else U
        if tag == "cls":
            if self.program.nn_base(fk[1]) and not (self.program.method(fk[1], "forward")
                                                    or self.program.method(fk[1], "__call__")):
                return ("nn", self.program.nn_base(fk[1]))
            return ("inst", fk[1])
        if tag == "inst":
            targets = self.callee_funcs(fk)
            if targets:
                return targets[0][0].ret
            return T if self.program.nn_base(fk[1]) else U
        if tag == "nn":
            return T
        if tag == "alias":
            return self._qual_call_kind(fk[1], node, ctx)
        if tag == "extfn":
            return T
        if tag == "kernel":
            return S
        return U

    def _builtin_kind(self, name: str, node: ast.Call, ctx: Ctx):
        if name in ("max", "min", "sum", "abs", "pow", "round", "divmod"):
            kinds = [self.eval(a, ctx) for a in node.args]
            if T in kinds:
                return T
            if all(nontensor(k) for k in kinds):
                return S
            return BOT if BOT in kinds else U
        if name == "getattr" and len(node.args) >= 2 and str_const(node.args[1]):
            rk = self.eval(node.args[0], ctx)
            if isinstance(rk, tuple) and rk[0] == "alias":
                return U
            return self.attr_kind(rk, node.args[1].value)
        if name == "super":
            return ("super", ctx.cls) if ctx.cls else U
        if name in ("iter", "next", "getattr", "vars", "globals", "locals", "eval", "exec", "__import__"):
            return U
        return S

    def _qual_call_kind(self, qn: str, node: ast.Call, ctx: Ctx):
        parts = qn.split(".")
        if parts[0] == "torch":
            if qn in ("torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer",
                      "torch.nn.parameter.Buffer"):
                return T
            if qn in ("torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load"):
                return ("ext",)
            layer = nn_layer(qn)
            if layer:
                if layer in ("ModuleList", "ModuleDict", "Sequential"):
                    if layer == "Sequential":
                        return ("nn", "Sequential")
                    inner = self._inner_layer(node, ctx)
                    return ("nnlist", inner) if inner else S
                if layer in NN_NONCOMPUTE_MODULES:
                    return S
                return ("nn", layer)
            if qn.startswith("torch.cuda."):
                return S
            if qn.startswith("torch.Tensor."):
                return S if parts[-1] in TENSOR_QUERY_METHODS else T
            if len(parts) == 2:
                name = parts[1]
                if name in TORCH_QUERY_FUNCS or name in ("Stream", "Event", "Generator"):
                    return S
                if name in TORCH_FUNCTIONS or name[:1].isupper():
                    return T
            if torch_compute(qn):
                return T
            return U
        if parts[0] in SCALAR_MODULES:
            return S
        return U

    def _inner_layer(self, node: ast.Call, ctx: Ctx) -> str | None:
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            for n in ast.walk(arg):
                if isinstance(n, ast.Call):
                    layer = nn_layer(self.program.qualname(n.func, ctx))
                    if layer and layer not in NN_NONCOMPUTE_MODULES:
                        return layer
            k = elem(self.eval(arg, ctx))
            if isinstance(k, tuple) and k[0] == "nn":
                return k[1]
        return None

