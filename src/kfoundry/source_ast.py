"""`ast.parse` behind one process-wide lock.

CPython before 3.13 counts the depth of the tree it is building in state shared by every thread of
the interpreter. When two threads parse at once (the evaluation queue's threads run the static guard
while the main thread reads a parent's source for the tuner) and a garbage collection inside one
parse lets the other thread run, both move the same counter and one of them fails with
`SystemError: AST constructor recursion depth mismatch`. Every parse in kfoundry goes through here."""

from __future__ import annotations

import ast
import threading

_LOCK = threading.RLock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)


def literal_eval(text: str):
    """`ast.literal_eval` of a string, its parse under the same lock."""
    return ast.literal_eval(parse(text.lstrip(" \t"), mode="eval"))
