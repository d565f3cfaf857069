"""ModelNew's constructor: the reference's own `Model.__init__`, copied with what it needs from the problem file.

The evaluator builds Model and ModelNew right after the same seed, so building the same layers in the same
order gives the same weights; only forward is replaced by kernel launches. Copied: the problem's imports,
the top-level definitions `__init__` refers to (helper classes, functions, constants), and the methods of
Model that `__init__` calls.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from kfoundry import source_ast

PROBLEM_NAMES = frozenset({"Model", "get_inputs", "get_init_inputs"})


@dataclass
class InitParts:
    imports: list[str] = field(default_factory=list)
    definitions: list[str] = field(default_factory=list)  # top-level code the constructor needs
    bases: str = "nn.Module"
    class_body: list[str] = field(default_factory=list)  # __init__ and its helpers, indented for ModelNew
    forward_args: list[str] = field(default_factory=list)  # forward's parameter names, without self
    forward_signature: str = "self"


class InitError(ValueError):
    """The problem's Model has a shape this module cannot copy."""


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        out = set()
        for target in targets:
            for n in ast.walk(target):
                if isinstance(n, ast.Name):
                    out.add(n.id)
        return out
    return set()


def _loaded_names(node: ast.AST) -> set[str]:
    """Names a definition reads from outside itself (its parameters and local assignments aside)."""
    loaded = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    local = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    local |= {a.arg for n in ast.walk(node) if isinstance(n, ast.arguments)
              for a in n.posonlyargs + n.args + n.kwonlyargs + [x for x in (n.vararg, n.kwarg) if x]}
    return loaded - local


class _Rename(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == "Model":
            return ast.copy_location(ast.Name("ModelNew", node.ctx), node)
        return node


def _self_calls(fn: ast.FunctionDef) -> set[str]:
    found = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            found.add(n.attr)
    return found


def init_parts(text: str) -> InitParts:
    """What ModelNew needs from the problem's source to construct itself exactly like Model."""
    tree = source_ast.parse(text)
    parts = InitParts()
    top: dict[str, ast.stmt] = {}
    order: dict[int, int] = {}
    for i, node in enumerate(tree.body):
        order[id(node)] = i
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            parts.imports.append(ast.unparse(node))
        for name in _defined(node):
            top[name] = node
    model = top.get("Model")
    if not isinstance(model, ast.ClassDef):
        raise InitError("Model is not a class defined in the problem file")
    methods = {n.name: n for n in model.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    forward = methods.get("forward")
    if forward is None:
        raise InitError("Model defines no forward")
    args = forward.args
    if args.vararg or args.kwarg or args.kwonlyargs:
        raise InitError("forward takes *args, **kwargs or keyword-only arguments")
    parts.forward_args = [a.arg for a in args.posonlyargs + args.args][1:]
    parts.forward_signature = ast.unparse(args)
    # the constructor, the methods it calls (transitively), class-level statements
    kept: list[ast.stmt] = []
    wanted = ["__init__"] if "__init__" in methods else []
    seen: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in seen or name not in methods or name == "forward":
            continue
        seen.add(name)
        wanted.extend(_self_calls(methods[name]))
    for node in model.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name in seen:
                kept.append(node)
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            kept.append(node)  # class attributes
    renamed = [ast.fix_missing_locations(_Rename().visit(source_ast.parse(ast.unparse(n)).body[0])) for n in kept]
    parts.class_body = ["\n".join("    " + line if line else "" for line in ast.unparse(n).split("\n"))
                        for n in renamed]
    parts.bases = ", ".join(ast.unparse(b) for b in model.bases) or "nn.Module"
    # top-level definitions these refer to, transitively
    needed: set[str] = set()
    pending = set().union(*(_loaded_names(n) for n in kept), *(_loaded_names(b) for b in model.bases))
    known = set(dir(builtins)) | {"self", "ModelNew"}
    while pending:
        name = pending.pop()
        if name in needed or name in known or name in PROBLEM_NAMES or name not in top:
            continue
        node = top[name]
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        needed.add(name)
        pending |= _loaded_names(node) - needed
    nodes = sorted({id(top[n]): top[n] for n in needed}.values(), key=lambda n: order[id(n)])
    parts.definitions = [ast.unparse(n) for n in nodes]
    return parts
