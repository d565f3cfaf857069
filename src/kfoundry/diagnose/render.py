"""A Diagnosis as compact markdown (for prompts and, rendered, for a terminal) or as plain text (for a
log or a pipe): most important first, bounded in length."""

from __future__ import annotations

from kfoundry.types import DiagnosticFinding, Diagnosis

DEFAULT_MAX_CHARS = 2500
MAX_EVIDENCE = 4
MAX_LINE = 240


def _clip(text: str, limit: int = MAX_LINE) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _code(text: str, markdown: bool) -> str:
    return f"`{text}`" if markdown else text


def render_finding(number: int, finding: DiagnosticFinding, markdown: bool = True) -> str:
    head = (f"**{finding.severity}** `{finding.category}`" if markdown
            else f"{finding.severity} [{finding.category}]")
    lines = [f"{number}. {head}: {_clip(finding.title)}"]
    location = finding.location
    if location and location.line:
        where = f"line {location.line}" + (f":{location.column}" if location.column else "")
        if location.function:
            where += f" in {_code(location.function, markdown)}"
        if location.text:
            where += f": {_code(_clip(location.text, 120), markdown)}"
        lines.append(f"   - at {where}")
    for item in finding.evidence[:MAX_EVIDENCE]:
        lines.append(f"   - {_clip(item)}")
    if len(finding.evidence) > MAX_EVIDENCE:
        lines.append(f"   - ({len(finding.evidence) - MAX_EVIDENCE} more)")
    if finding.direction:
        lines.append(f"   - next: {_clip(finding.direction, 400)}")
    return "\n".join(lines)


def render_markdown(diagnosis: Diagnosis, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Findings in order until `max_chars`; what does not fit is counted, never cut mid-finding."""
    return _render(diagnosis, max_chars, markdown=True)


def render_text(diagnosis: Diagnosis, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The same as plain text, for a log or a pipe: no heading marks, bold or code spans."""
    return _render(diagnosis, max_chars, markdown=False)


def _render(diagnosis: Diagnosis, max_chars: int, markdown: bool) -> str:
    head = f"{'### ' if markdown else ''}Diagnosis: {diagnosis.status}"
    if diagnosis.bound:
        head += f", {diagnosis.bound}-bound"
    head += f" (next focus: {diagnosis.focus})\n{_clip(diagnosis.summary, 400)}"
    parts, used = [head], len(head)
    for number, finding in enumerate(diagnosis.findings, start=1):
        block = render_finding(number, finding, markdown)
        if number > 1 and used + len(block) + 1 > max_chars:  # the first always goes in
            left = len(diagnosis.findings) - number + 1
            parts.append(f"({left} less important finding(s) left out for length)")
            break
        parts.append(block)
        used += len(block) + 1
    return "\n".join(parts)
