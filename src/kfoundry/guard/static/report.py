"""The findings of one run: one per rule and line (a second finding there adds its evidence to the first),
and the source text a finding shows as evidence."""

from __future__ import annotations

import ast
import re

from ..findings import RULES, Finding

# what to do instead, said in the finding's own message (the newer rules' messages carry it)
_INSTEAD = {
    "file-read": " (instead: read nothing from disk; take every input from forward's arguments and the constructor)",
    "cpp-system": " (instead: let the extension only compute; no libc I/O, processes, sockets or environment)",
}


class Report:
    def __init__(self, source: str):
        self.source = source
        self.findings: dict[tuple[str, int], Finding] = {}
        self._lines: list[str] | None = None

    def add(self, rule: str, node_or_line, message: str, evidence: list[str]):
        assert rule in RULES, rule
        line = node_or_line if isinstance(node_or_line, int) else getattr(node_or_line, "lineno", None)
        key = (rule, line or 0)
        if key in self.findings:
            f = self.findings[key]
            for e in evidence:
                if e not in f.evidence:
                    f.evidence.append(e)
            return
        message += _INSTEAD.get(rule, "")
        self.findings[key] = Finding(rule=rule, message=message, line=line, evidence=list(evidence))

    def src(self, node, limit: int = 80) -> str:
        text = None
        if getattr(node, "end_lineno", None) is not None:
            if self._lines is None:
                # the line breaks ast counts (str.splitlines would also split at \f, \x1c, ...)
                self._lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", self.source)
            lines = self._lines[node.lineno - 1: node.end_lineno]
            if lines:
                # col offsets are in UTF-8 bytes
                if len(lines) == 1:
                    text = lines[0].encode()[node.col_offset: node.end_col_offset].decode(errors="replace")
                else:
                    first = lines[0].encode()[node.col_offset:].decode(errors="replace")
                    last = lines[-1].encode()[: node.end_col_offset].decode(errors="replace")
                    text = first + "".join(lines[1:-1]) + last
        if text is None:
            try:
                text = ast.unparse(node)
            except Exception:  # pragma: no cover - unparse of odd nodes
                text = type(node).__name__
        text = " ".join(text.split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    def ordered(self) -> list[Finding]:
        """The findings by line, then rule."""
        return sorted(self.findings.values(), key=lambda f: (f.line or 0, f.rule))
