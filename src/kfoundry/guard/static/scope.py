"""The forward scope: the functions of the file that ``ModelNew.forward`` reaches (and the other methods of
ModelNew, unless only ``__init__`` reaches them). ``__init__`` and what only it reaches stay outside:
folding constants from parameters there with torch ops is legitimate."""

from __future__ import annotations

import ast

from .inference import Inference
from .program import Ctx, Func


def forward_scope(inf: Inference) -> set[Func]:
    program = inf.program
    if "ModelNew" not in program.classes:
        return set()
    visible: dict[str, Func] = {}
    for c in reversed(program.mro("ModelNew")):
        visible.update(program.methods.get(c, {}))
    init = visible.get("__init__")
    init_reach = reach(inf, [init]) if init else set()
    fwd_reach = reach(inf, [visible.get("forward"), visible.get("__call__")])
    others = [f for n, f in visible.items()
              if n != "__init__" and not f.kernel and f not in init_reach and f not in fwd_reach]
    scope = fwd_reach | reach(inf, others)
    scope.discard(init)
    return scope


def refs(inf: Inference, node, ctx: Ctx) -> list[Func]:
    """The file's functions a node refers to: calls, functions passed by name, properties read."""
    out = []
    if isinstance(node, ast.Call):
        out += [f for f, _ in inf.call_targets(node, ctx)]
    elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
        k = inf.eval(node, ctx)
        if isinstance(k, tuple) and k[0] in ("func", "method", "apply"):
            out += [f for f, _ in inf.callee_funcs(k)]
        if isinstance(node, ast.Attribute):
            rk = inf.eval(node.value, ctx)
            if isinstance(rk, tuple) and rk[0] in ("self", "inst"):
                f = inf.program.method(rk[1], node.attr)
                if f is not None and f.prop and not f.kernel:
                    out.append(f)
    return out


def reach(inf: Inference, roots) -> set[Func]:
    """The roots and every function they reach, transitively (kernels aside)."""
    seen: set[Func] = set()
    stack = [r for r in roots if r is not None]
    while stack:
        f = stack.pop()
        if f in seen or f.kernel:
            continue
        seen.add(f)
        ctx = inf.ctx(f)
        for n in inf.program.scope_nodes(f.node):
            stack.extend(refs(inf, n, ctx))
    return seen

