"""Loop-invariant host lines out of a rolled loop's body: a view of a parameter, or the fp16 split or channels-last
copy a GEMM or convolution makes of it, is the same at every step, so it is made once before the loop (one launch
per call instead of one per step). Only lines that assign the result of a pure call (a view, or one of the
composer's copy helpers) from names the loop never assigns move; allocations and launches stay."""

from __future__ import annotations

import ast

# tensor methods that make a view or a copy of what they are called on, nothing else
VIEW_METHODS = frozenset({"transpose", "permute", "reshape", "view", "unsqueeze", "squeeze", "expand", "flatten",
                          "contiguous", "narrow", "t"})
COPY_HELPERS = frozenset({"_split_fp16x3", "_channels_last_half", "_channels_last"})


def hoist(body: list[str], step: str, written: set[str]) -> tuple[list[str], list[str]]:
    """(the lines that move before the loop, the lines that stay in it), each in its order. `body` holds one
    statement or comment per entry, as the forward writer makes them; `step` is the loop's variable, `written`
    the tensors made before the loop that its kernels write into (a copy of one is not the same at every step)."""
    statements = [_statement(entry) for entry in body]
    assigned: dict[str, int] = {name: 1 for name in written | {step}}  # name -> how many statements assign it
    for statement in statements:
        for name in _targets(statement):
            assigned[name] = assigned.get(name, 0) + 1
    moved, kept = [], []
    for entry, statement in zip(body, statements):
        targets = _targets(statement)
        if _pure(statement) and not any(assigned.get(name) for name in _reads(statement)) and \
                all(assigned[name] == 1 for name in targets):
            moved.append(entry)
            for name in targets:
                assigned[name] = 0
        else:
            kept.append(entry)
    return moved, kept


def _statement(entry: str) -> ast.stmt | None:
    try:
        tree = ast.parse(entry.strip())
    except SyntaxError:
        return None
    return tree.body[0] if len(tree.body) == 1 else None


def _targets(statement: ast.stmt | None) -> list[str]:
    if not isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)):
        return []
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _reads(statement: ast.Assign) -> set[str]:
    return {n.id for n in ast.walk(statement.value) if isinstance(n, ast.Name)}


def _pure(statement: ast.stmt | None) -> bool:
    if not isinstance(statement, ast.Assign) or not isinstance(statement.value, ast.Call):
        return False
    func = statement.value.func
    if isinstance(func, ast.Name):
        return func.id in COPY_HELPERS
    return isinstance(func, ast.Attribute) and func.attr in VIEW_METHODS and _plain_object(func.value)


def _plain_object(node: ast.expr) -> bool:
    """A name, or an attribute chain on one (self.fc.weight): nothing that calls anything."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)
