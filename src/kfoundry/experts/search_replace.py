"""SEARCH/REPLACE edit blocks: finding them in a reply and applying them to the parent's source.

A block is
    <<<<<<< SEARCH
    lines of the parent
    =======
    the lines that replace them
    >>>>>>> REPLACE
Blocks apply in order, each to the result of the ones before. A SEARCH part must match exactly one
place: first verbatim (line by line), then ignoring blank lines and differences in whitespace, in
which case the replacement is re-indented by the indentation the parent has there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SEARCH_LINE = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$", re.IGNORECASE)
DIVIDER_LINE = re.compile(r"^\s*={5,9}\s*$")
REPLACE_LINE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$", re.IGNORECASE)


class EditError(ValueError):
    """A reason a person and the next prompt can use."""


@dataclass
class EditBlock:
    number: int  # 1-based, in the reply's order
    search: list[str]
    replace: list[str]

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.search if line.strip()), "")


def has_blocks(text: str) -> bool:
    return any(SEARCH_LINE.match(line) for line in text.splitlines())


def find_blocks(text: str) -> list[EditBlock]:
    """The blocks of a reply, in order; EditError for a block that is not closed."""
    blocks: list[EditBlock] = []
    state, search, replace = "outside", [], []
    for line in text.splitlines():
        if state == "outside":
            if SEARCH_LINE.match(line):
                state, search, replace = "search", [], []
        elif state == "search":
            if DIVIDER_LINE.match(line):
                state = "replace"
            elif SEARCH_LINE.match(line) or REPLACE_LINE.match(line):
                raise EditError(f"SEARCH/REPLACE block {len(blocks) + 1} has no ======= line between its "
                                "SEARCH and REPLACE parts")
            else:
                search.append(line)
        elif REPLACE_LINE.match(line):
            blocks.append(EditBlock(len(blocks) + 1, search, replace))
            state = "outside"
        else:
            replace.append(line)
    if state != "outside":
        raise EditError(f"SEARCH/REPLACE block {len(blocks) + 1} is not closed with '>>>>>>> REPLACE' "
                        "(the reply may have been cut off)")
    return blocks


def _norm(line: str) -> str:
    return " ".join(line.split())


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _reindent(lines: list[str], searched: str, found: str) -> list[str]:
    """Shift `lines` by the difference between the SEARCH text's indentation and the parent's."""
    if searched == found:
        return lines
    if found.startswith(searched):
        extra = found[len(searched):]
        return [extra + line if line.strip() else line for line in lines]
    if searched.startswith(found):
        cut = searched[len(found):]
        return [line.removeprefix(cut) for line in lines]
    return lines


def _exact(lines: list[str], search: list[str]) -> list[int]:
    k = len(search)
    return [i for i in range(len(lines) - k + 1) if lines[i:i + k] == search]


def _tolerant(lines: list[str], search: list[str]) -> list[tuple[int, int]]:
    """(first, last) parent line indices whose non-blank lines equal the search's, whitespace aside."""
    wanted = [_norm(line) for line in search if line.strip()]
    kept = [(i, _norm(line)) for i, line in enumerate(lines) if line.strip()]
    k = len(wanted)
    return [(kept[j][0], kept[j + k - 1][0]) for j in range(len(kept) - k + 1)
            if [text for _, text in kept[j:j + k]] == wanted]


def apply_block(source: str, block: EditBlock) -> tuple[str, str]:
    """(new source, how it matched: "exact" or "whitespace-tolerant"); EditError if it does not apply."""
    where = f"SEARCH/REPLACE block {block.number} (first line `{block.first_line}`)"
    if not block.first_line:
        raise EditError(f"SEARCH/REPLACE block {block.number} has an empty SEARCH part: copy the parent's "
                        "lines to replace into it")
    lines = source.split("\n")
    hits = _exact(lines, block.search)
    if len(hits) == 1:
        i = hits[0]
        return "\n".join(lines[:i] + block.replace + lines[i + len(block.search):]), "exact"
    if len(hits) > 1:
        raise EditError(f"{where} matches {len(hits)} places in the parent: include more lines to make it unique")
    spans = _tolerant(lines, block.search)
    if len(spans) > 1:
        raise EditError(f"{where} matches {len(spans)} places in the parent: include more lines to make it unique")
    if not spans:
        raise EditError(f"{where} does not apply: its SEARCH text is not in the parent; copy it verbatim "
                        "from the parent, or reply with a complete file")
    first, last = spans[0]
    searched = _indent(next(line for line in block.search if line.strip()))
    replacement = _reindent(block.replace, searched, _indent(lines[first]))
    return "\n".join(lines[:first] + replacement + lines[last + 1:]), "whitespace-tolerant"
