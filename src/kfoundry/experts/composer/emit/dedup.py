"""Kernels that differ only in their names: an unrolled loop (a recurrent layer's steps) makes the same kernel
once per step, and every copy would be compiled on its own. Two kernels are the same when their sources match
with the kernel's name, its positional parameters and its local variables renamed in order of appearance
(constexpr parameters keep their names: launches pass them by keyword)."""

from __future__ import annotations

import ast
import io
import tokenize

from kfoundry import source_ast


def canonical(source: str, name: str) -> str:
    """The kernel's source with its own names replaced by positional ones."""
    function = next(node for node in source_ast.parse(source).body if isinstance(node, ast.FunctionDef))
    keyword_only = {a.arg for a in function.args.args if a.annotation is not None}
    names = [a.arg for a in function.args.args if a.annotation is None]
    names += [n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    mapping = {name: "_kernel"}
    for local in names:
        if local not in keyword_only and local not in mapping:
            mapping[local] = f"_v{len(mapping)}"
    out, after_dot = [], False
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        text = token.string
        if token.type == tokenize.NAME and not after_dot:
            text = mapping.get(text, text)
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            out.append(text)
        after_dot = token.type == tokenize.OP and token.string == "."
    return " ".join(out)
