"""Turning an LLM's reply into a candidate source, or into a reason it could not be one.

Accepted: one complete Python file in a fence (```python, ```py or bare ```; prose around it; when
there are several fences, the one defining ModelNew, the last complete one if several do; a final
fence the reply never closed), a reply that is nothing but code, or SEARCH/REPLACE blocks applied
to the parent (inside fences or not). Every failure is a sentence a person and the next prompt can use.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Literal

from kfoundry import source_ast
from kfoundry.experts.search_replace import EditError, apply_block, find_blocks, has_blocks

PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3", "python-triton", "triton"})
FENCE_OPEN = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*([^\s`]*)[^`]*$")
DEFINES_MODELNEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.MULTILINE)
CODE_START = re.compile(r"^(import |from |@|class |def |#)")
# a refusal says so at the start; an apology alone ("sorry for the confusion") is not one
_VERBS = r"(?:help|assist|comply|provide|fulfil|write|create|do that)\b"
REFUSAL = re.compile(
    rf"\bI(?:['’]m| am)(?: not able| unable) to {_VERBS}|\bI (?:can['’]t|cannot|can not|won['’]t|will not) {_VERBS}"
    r"|\bas an AI\b", re.IGNORECASE)
REFUSAL_WINDOW = 400


@dataclass
class ParsedReply:
    source: str | None  # the candidate file, when the reply yields one
    kind: Literal["file", "search_replace"] | None
    failure: str | None = None
    blocks_applied: int = 0
    notes: list[str] = field(default_factory=list)  # how the code was found (several fences, fuzzy matches)
    draft: str | None = None  # the code found even when it failed a check (for logs, never for evaluation)

    @property
    def ok(self) -> bool:
        return self.failure is None and self.source is not None


@dataclass
class Fence:
    tag: str
    text: str
    closed: bool


def find_fences(text: str) -> list[Fence]:
    """Fenced blocks in order; a fence indented (inside a list item) has its body dedented to match."""
    fences: list[Fence] = []
    opener: tuple[str, str, str] | None = None  # (indent, marker, tag)
    body: list[str] = []
    for line in text.split("\n"):
        if opener is None:
            m = FENCE_OPEN.match(line)
            if m:
                opener, body = (m.group(1), m.group(2), m.group(3).lower()), []
            continue
        indent, marker, tag = opener
        stripped = line.strip()
        if stripped and set(stripped) == {marker[0]} and len(stripped) >= len(marker):
            fences.append(Fence(tag, "\n".join(body), closed=True))
            opener = None
        else:
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
    if opener is not None:
        fences.append(Fence(opener[2], "\n".join(body), closed=False))
    return fences


def _code_problem(code: str) -> str | None:
    """Why the code cannot be a candidate, or None."""
    try:
        tree = source_ast.parse(code)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" if exc.lineno else "somewhere"
        text = f": `{exc.text.strip()}`" if exc.text and exc.text.strip() else ""
        return f"the code does not parse: {where}: {exc.msg}{text}"
    if not any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body):
        return "the code defines no class ModelNew at module level: the candidate file must define it"
    return None


def _finish(code: str, kind: str, parent: str | None, notes: list[str], applied: int = 0,
            extra: str = "") -> ParsedReply:
    code = code.strip("\n") + "\n"
    problem = _code_problem(code)
    if problem is None and parent is not None and code.strip() == parent.strip():
        problem = "the reply repeats the parent unchanged"
    if problem is not None:
        return ParsedReply(None, kind, problem + extra, applied, notes, draft=code)  # type: ignore[arg-type]
    return ParsedReply(code, kind, None, applied, notes, draft=code)  # type: ignore[arg-type]


def _from_edits(text: str, parent: str | None) -> ParsedReply:
    if parent is None:
        return ParsedReply(None, "search_replace", "the reply has SEARCH/REPLACE blocks but there is no parent "
                           "to apply them to: reply with one complete file")
    notes: list[str] = []
    try:
        blocks = find_blocks(text)
    except EditError as exc:
        return ParsedReply(None, "search_replace", str(exc))
    source, applied = parent.replace("\r\n", "\n"), 0
    for block in blocks:
        try:
            source, how = apply_block(source, block)
        except EditError as exc:
            return ParsedReply(None, "search_replace", f"{exc} ({applied} of {len(blocks)} block(s) applied)",
                               applied, notes)
        applied += 1
        if how != "exact":
            notes.append(f"block {block.number} matched the parent only when ignoring whitespace")
    result = _finish(source, "search_replace", parent, notes, applied)
    if result.failure:
        result.failure = f"after applying {applied} SEARCH/REPLACE block(s), {result.failure}"
    return result


def _from_fences(fences: list[Fence], parent: str | None) -> ParsedReply:
    defining = [f for f in fences if DEFINES_MODELNEW.search(f.text)]
    if not defining:
        tags = sorted({f.tag or "untagged" for f in fences})
        if any(f.tag in PYTHON_TAGS for f in fences):
            return ParsedReply(None, "file", "the code defines no class ModelNew: the reply's code block(s) "
                               "must hold the whole candidate file, ModelNew included",
                               draft=next(f.text for f in reversed(fences) if f.tag in PYTHON_TAGS))
        return ParsedReply(None, "file", f"the reply's code blocks ({', '.join(tags)}) hold no Python file "
                           "defining class ModelNew")
    closed = [f for f in defining if f.closed]
    chosen = closed[-1] if closed else defining[-1]
    notes = [f"{len(fences)} code blocks: took the {'last complete' if closed else 'last'} one defining ModelNew"] \
        if len(fences) > 1 else []
    extra = ""
    if not chosen.closed:
        notes.append("the code block is not closed")
        extra = " (the reply looks cut off: its last code block is not closed)"
    return _finish(chosen.text, "file", parent, notes, extra=extra)


def _bare_code(text: str) -> str | None:
    """The reply's code when it has no fence: all of it, or from the first line that starts code."""
    if not DEFINES_MODELNEW.search(text):
        return None
    lines = text.split("\n")
    for start in range(len(lines)):
        if start == 0 or CODE_START.match(lines[start]):
            code = "\n".join(lines[start:])
            try:
                source_ast.parse(code)
                return code
            except SyntaxError:
                continue
    return None


def parse_reply(text: str, parent_source: str | None = None) -> ParsedReply:
    text = (text or "").replace("\r\n", "\n")
    if not text.strip():
        return ParsedReply(None, None, "the reply is empty")
    if has_blocks(text):
        return _from_edits(text, parent_source)
    fences = find_fences(text)
    if fences:
        return _from_fences(fences, parent_source)
    code = _bare_code(text)
    if code is not None:
        return _finish(code, "file", parent_source, ["no code fence: took the reply's code as the file"])
    if REFUSAL.search(text[:REFUSAL_WINDOW]):
        sentence = text.strip().split("\n")[0][:160]
        return ParsedReply(None, None, f"the model refused: \"{sentence}\"")
    return ParsedReply(None, None, "the reply has no code block: give the whole candidate file in one ```python "
                       "fence (or SEARCH/REPLACE blocks against the parent)")
