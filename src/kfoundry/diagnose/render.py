"""A Diagnosis as compact markdown: most important first, bounded in length (it goes into prompts)."""

from __future__ import annotations

from kfoundry.types import DiagnosticFinding, Diagnosis

DEFAULT_MAX_CHARS = 2500
MAX_EVIDENCE = 4
MAX_LINE = 240


def _clip(text: str, limit: int = MAX_LINE) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_finding(number: int, finding: DiagnosticFinding) -> str:
    lines = [f"{number}. **{finding.severity}** `{finding.category}`: {_clip(finding.title)}"]
    location = finding.location
    if location and location.line:
        where = f"line {location.line}" + (f":{location.column}" if location.column else "")
        if location.function:
            where += f" in `{location.function}`"
        if location.text:
            where += f": `{_clip(location.text, 120)}`"
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
    head = f"### Diagnosis: {diagnosis.status}"
    if diagnosis.bound:
        head += f", {diagnosis.bound}-bound"
    head += f" (next focus: {diagnosis.focus})\n{_clip(diagnosis.summary, 400)}"
    parts, used = [head], len(head)
    for number, finding in enumerate(diagnosis.findings, start=1):
        block = render_finding(number, finding)
        if number > 1 and used + len(block) + 1 > max_chars:  # the first always goes in
            left = len(diagnosis.findings) - number + 1
            parts.append(f"({left} less important finding(s) left out for length)")
            break
        parts.append(block)
        used += len(block) + 1
    return "\n".join(parts)
