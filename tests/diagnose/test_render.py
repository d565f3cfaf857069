"""kfoundry.diagnose.render: the markdown a prompt gets (and a terminal, rendered), and the same as
plain text for a log or a pipe: most important first, bounded."""

import io

from rich.console import Console

from kfoundry.diagnose.render import render_markdown, render_text
from kfoundry.types import DiagnosticFinding, Diagnosis, SourceLocation


def _diagnosis(count: int) -> Diagnosis:
    findings = [DiagnosticFinding(
        category="error-pattern", severity="error" if i == 0 else "info", title=f"finding number {i}",
        evidence=[f"evidence {i}.{j}" for j in range(6)],
        location=SourceLocation(file="k.py", line=10 + i, column=4, text="tl.store(y_ptr + offs, y)", function="_k"),
        direction=f"do thing {i}") for i in range(count)]
    return Diagnosis(status="wrong_output", summary="wrong_output: finding number 0", findings=findings,
                     focus="repair")


def test_markdown_names_status_focus_location_evidence_and_direction():
    text = render_markdown(_diagnosis(1))
    lines = text.splitlines()
    assert lines[0] == "### Diagnosis: wrong_output (next focus: repair)"
    assert "1. **error** `error-pattern`: finding number 0" in text
    assert "at line 10:4 in `_k`: `tl.store(y_ptr + offs, y)`" in text
    assert "evidence 0.3" in text and "evidence 0.4" not in text and "(2 more)" in text
    assert "next: do thing 0" in text


def test_markdown_is_bounded_and_says_what_it_left_out():
    text = render_markdown(_diagnosis(40), max_chars=1200)
    assert len(text) <= 1200 + 80  # the closing "left out" line may pass the bound
    assert "finding number 0" in text  # most important first
    assert "finding number 39" not in text
    assert "less important finding(s) left out for length" in text.splitlines()[-1]


def test_the_first_finding_always_goes_in():
    text = render_markdown(_diagnosis(2), max_chars=10)
    assert "finding number 0" in text and "finding number 1" not in text


def test_long_text_is_clipped_to_one_line():
    diagnosis = _diagnosis(1)
    diagnosis.findings[0].evidence = ["x" * 5000 + "\nsecond line"]
    text = render_markdown(diagnosis)
    assert max(len(line) for line in text.splitlines()) < 300


def test_plain_text_has_the_same_content_without_markdown_marks():
    diagnosis = _diagnosis(2)
    text = render_text(diagnosis)
    lines = text.splitlines()
    assert lines[0] == "Diagnosis: wrong_output (next focus: repair)"
    assert "1. error [error-pattern]: finding number 0" in text
    assert "at line 10:4 in _k: tl.store(y_ptr + offs, y)" in text
    assert not any(mark in text for mark in ("###", "**", "`"))
    assert len(lines) == len(render_markdown(diagnosis).splitlines())


def _shown(terminal: bool) -> str:
    from kfoundry.cli import render_diagnosis
    from kfoundry.types import Evaluation

    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=terminal, color_system=None)
    render_diagnosis(Evaluation(status="wrong_output", message="", diagnosis=_diagnosis(1)), console)
    return out.getvalue()


def test_a_terminal_gets_the_markdown_rendered_and_a_pipe_plain_text():
    shown = _shown(terminal=True)
    assert "Diagnosis: wrong_output (next focus: repair)" in shown and "finding number 0" in shown
    assert not any(mark in shown for mark in ("###", "**", "`"))
    assert _shown(terminal=False) == render_text(_diagnosis(1)) + "\n"
