"""Small questions about Python syntax trees that every part of the analysis asks."""

from __future__ import annotations

import ast


def str_const(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def flatten_targets(targets):
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            yield from flatten_targets(t.elts)
        elif isinstance(t, ast.Starred):
            yield from flatten_targets([t.value])
        else:
            yield t


def chain_root(node):
    """The Name (or Call) at the bottom of an a.b[c].d chain."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def module_level(body):
    """Statements at module (or class) level, looking into if/try/with/for blocks but not into defs."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
            yield from module_level(stmt.body)
            yield from module_level(getattr(stmt, "orelse", []))
        elif isinstance(stmt, (ast.Try, ast.TryStar)):
            yield from module_level(stmt.body)
            for h in stmt.handlers:
                yield from module_level(h.body)
            yield from module_level(stmt.orelse)
            yield from module_level(stmt.finalbody)


def own_nodes(root):
    """Nodes of a function's own body (no nested defs, lambdas or classes)."""
    stack = list(ast.iter_child_nodes(root))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))
