"""The lexical structure of C++/CUDA source text: comments, string and char literals (raw strings included;
``1'000`` is a digit separator), function definitions and the bodies of ``__device__``/``__global__``
functions."""

from __future__ import annotations

import re

# function definitions in the source (`__device__ void add(float v) { ... }`)
CPP_DEFINED = re.compile(r"\b([A-Za-z_]\w*)\s*\([^;{}()]*(?:\([^;{}()]*\)[^;{}()]*)*\)\s*(?:const\s*)?"
                         r"(?:noexcept\s*)?(?:->\s*[\w:<>]+\s*)?\{")


def _raw_string_start(code: str, i: int) -> bool:
    """Does the quote at code[i] open a C++ raw string (R"d(...)d", u8R"(...)", LR"(...)")?"""
    if i < 1 or code[i - 1] != "R":
        return False
    k = i - 1
    if code[k - 2: k] == "u8":
        k -= 2
    elif k >= 1 and code[k - 1] in "uUL":
        k -= 1
    return k == 0 or not (code[k - 1].isalnum() or code[k - 1] == "_")


def blank_cpp(code: str) -> tuple[str, str, list[tuple[int, int]]]:
    """(code with comments blanked, code with comments and string/char literals blanked, the literals'
    (start, end) spans, quotes included); newlines kept, so positions agree across the three.
    Raw strings (R"d(...)d") are literals to their closing delimiter, over lines; a quote after a digit
    (1'000'000) is a digit separator."""
    no_comments = []
    no_strings = []
    literals = []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            blank = " " * (j - i)
            no_comments.append(blank)
            no_strings.append(blank)
            i = j
        elif code.startswith("/*", i):
            j = code.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank = re.sub(r"[^\n]", " ", code[i:j])
            no_comments.append(blank)
            no_strings.append(blank)
            i = j
        elif c == '"' and _raw_string_start(code, i):
            paren = code.find("(", i + 1, i + 18)
            delim = code[i + 1: paren] if paren >= 0 else None
            if delim is None or re.search(r"[\s\\)]", delim):
                end = code.find("\n", i)  # not a well-formed raw string: up to the line's end
                j = n if end < 0 else end
            else:
                close = code.find(")" + delim + '"', paren + 1)
                j = n if close < 0 else close + len(delim) + 2
            no_comments.append(code[i:j])
            no_strings.append('"' + re.sub(r"[^\n]", " ", code[i + 1: j - 1]) + ('"' if j - i >= 2 else ""))
            literals.append((i, j))
            i = j
        elif c == "'" and i > 0 and _CPP_DIGITS_BEFORE.search(code, max(0, i - 64), i):
            no_comments.append(c)  # a digit separator
            no_strings.append(c)
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and code[j] != c and code[j] != "\n":
                j += 2 if code[j] == "\\" else 1
            j = min(j + 1, n)
            no_comments.append(code[i:j])
            no_strings.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            literals.append((i, j))
            i = j
        else:
            no_comments.append(c)
            no_strings.append(c)
            i += 1
    return "".join(no_comments), "".join(no_strings), literals


_CPP_DIGITS_BEFORE = re.compile(r"(?<![\w.'])\.?\d[\w.']*$")  # a number literal runs up to the quote
_CPP_QUALIFIERS_BEFORE = re.compile(r"^[\w\s:<>,*&]*$")


def device_spans(plain: str) -> list[tuple[int, int]]:
    """(start, end) of the bodies of the source's __device__/__global__ functions (not __host__ ones)."""
    spans = []
    for m in CPP_DEFINED.finditer(plain):
        start = max(plain.rfind(c, 0, m.start()) for c in ";{}")
        quals = "\n".join(line for line in plain[start + 1: m.start()].split("\n")
                          if not line.lstrip().startswith("#"))
        if (not re.search(r"\b__(?:device|global)__\b", quals) or "__host__" in quals
                or not _CPP_QUALIFIERS_BEFORE.match(quals)):
            continue
        depth, j = 0, m.end() - 1
        while j < len(plain):
            if plain[j] == "{":
                depth += 1
            elif plain[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        spans.append((m.end() - 1, j + 1))
    return spans


