"""The identity of a candidate's source: the same code, whatever its comments and blank lines."""

from __future__ import annotations

import hashlib
import io
import tokenize


def _comment_starts(source: str) -> dict[int, int] | None:
    """Line number -> column where a comment starts, or None when the source does not tokenize."""
    starts: dict[int, int] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                starts[token.start[0]] = token.start[1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return starts


def normalize_source(source: str) -> str:
    """The source without comments, blank lines and trailing spaces.

    Comments are found with the tokenizer so a '#' inside a string (a CUDA `#include` in a
    load_inline string) is kept; source that does not tokenize loses only whole-line comments.
    The run store and the search both identify code by this: one definition for both."""
    starts = _comment_starts(source)
    lines = []
    for number, line in enumerate(source.splitlines(), start=1):
        if starts is None:
            if line.lstrip().startswith("#"):
                continue
        elif number in starts:
            line = line[:starts[number]]
        line = line.rstrip()
        if line:
            lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


def source_hash(source: str) -> str:
    return hashlib.sha256(normalize_source(source).encode("utf-8")).hexdigest()
