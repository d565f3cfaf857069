"""One evaluation in, one Diagnosis out: the findings of every kind that applies, most important
first, and the concern the next expert should take (its focus)."""

from __future__ import annotations

from pathlib import Path

from kfoundry.diagnose.cheating import cheating_findings
from kfoundry.diagnose.errors import error_findings
from kfoundry.diagnose.lint import lint_findings
from kfoundry.diagnose.ncu import ncu_findings
from kfoundry.diagnose.numeric import pattern_findings, race_findings
from kfoundry.diagnose.performance import performance_findings
from kfoundry.diagnose.sanitizer import sanitizer_findings
from kfoundry.types import SEVERITIES, DiagnosticFinding, Diagnosis, Evaluation

FAILURES = ("compile_error", "runtime_error", "timeout", "crash")
# error patterns that point at the bounds of loads and stores (the lint's unmasked accesses)
BOUNDS_PATTERNS = ("tail", "nonfinite", "periodic", "untouched", "zeros")


def _source(evaluation: Evaluation, source: str | None) -> str | None:
    if source is not None:
        return source
    try:
        return Path(evaluation.candidate).read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None


def _wrong_output(evaluation: Evaluation, source: str | None) -> list[DiagnosticFinding]:
    pattern = evaluation.error_pattern
    if pattern and "error" not in pattern:
        findings = pattern_findings(pattern)
    else:
        c = evaluation.correctness
        evidence = [f"max abs error {c.max_abs_error:.3g}" if c.max_abs_error is not None else "",
                    f"{c.mismatch_fraction:.2%} of elements off" if c.mismatch_fraction is not None else "",
                    f"first bad index {c.first_bad_index}" if c.first_bad_index else ""]
        if pattern and "error" in pattern:
            evidence.append(f"the error pattern could not be computed: {pattern['error']}")
        findings = [DiagnosticFinding(
            category="wrong-values", severity="error", title=evaluation.message.split(" [reproduce")[0],
            evidence=[e for e in evidence if e],
            direction="compare the kernel's index math and masks with the reference, one output at a time")]
    kinds = {p.get("kind") for p in (pattern or {}).get("patterns", [])}
    if source and kinds & set(BOUNDS_PATTERNS):
        findings += lint_findings(source, evaluation.candidate or None)
    return findings


def _repeat_findings(evaluation: Evaluation) -> list[DiagnosticFinding]:
    """Two identical runs differed: a race, unless only never-written memory differed."""
    repeat = evaluation.repeat
    if not repeat.get("garbage_only"):
        return race_findings(repeat)
    return [DiagnosticFinding(
        category="uninitialized", severity="error",
        title=f"{repeat.get('count')} output element(s) hold leftover memory (NaN, denormals or absurd values) "
              "that changes from run to run: they are never written",
        evidence=[f"first at {repeat.get('first_index')}", f"{repeat.get('fraction', 0):.2%} of the output"],
        direction="every output element must be stored once: the grid must cover the whole output "
                  "(triton.cdiv) and each store's mask must be exactly offs < n",
        data={key: repeat.get(key) for key in ("count", "fraction", "first_index", "output")})]


def _tool_findings(evaluation: Evaluation, source: str | None) -> list[DiagnosticFinding]:
    out = []
    ncu = evaluation.tools.get("ncu")
    if ncu:
        if ncu.get("records"):
            out += ncu_findings(ncu["records"])
        if ncu.get("error"):
            out.append(DiagnosticFinding("ncu", "info", f"Nsight Compute: {ncu['error']}"))
    sanitizer = evaluation.tools.get("sanitizer")
    if sanitizer:
        if sanitizer.get("report"):
            out += sanitizer_findings(sanitizer["report"], source)
        if sanitizer.get("error"):
            out.append(DiagnosticFinding("sanitizer", "info", f"compute-sanitizer: {sanitizer['error']}"))
    return out


def _focus(evaluation: Evaluation, bound: str | None, findings: list[DiagnosticFinding]) -> str:
    if evaluation.status != "ok":
        return "repair"
    if bound is None:
        return "none"
    for finding in findings:  # near the roofline: only a different algorithm can still win
        fraction = finding.data.get("fraction_of_roofline")
        if finding.category == "roofline" and isinstance(fraction, (int, float)) and fraction >= 0.8:
            return "algorithm"
    kernels = {k.get("name") for k in evaluation.profile.get("kernels") or []}
    if bound in ("memory", "launch") and len(kernels) > 1:
        return "fusion"
    return {"memory": "memory", "compute": "compute", "launch": "launch", "latency": "algorithm"}.get(bound, "none")


def _summary(evaluation: Evaluation, findings: list[DiagnosticFinding], bound: str | None) -> str:
    head = evaluation.status
    if bound:
        head += f", {bound}-bound"
    top = next((f for f in findings if f.severity == "error"), findings[0] if findings else None)
    return f"{head}: {top.title}" if top else f"{head}: {evaluation.message}"


def diagnose(evaluation: Evaluation, source: str | None = None) -> Diagnosis:
    """The Diagnosis of an evaluation; `source` is the candidate's text (read from its file if None)."""
    source = _source(evaluation, source)
    status, bound = evaluation.status, None
    findings: list[DiagnosticFinding] = []
    if status in FAILURES:
        findings += error_findings(evaluation, source)
    elif status == "wrong_output":
        findings += _wrong_output(evaluation, source)
    elif status == "cheating":
        findings += cheating_findings(evaluation, source)
    if evaluation.repeat:
        repeat = _repeat_findings(evaluation)
        if any(f.category == "race" and f.severity == "error" for f in repeat):
            # a race explains any error pattern the runs happen to show: it goes first among the patterns
            for finding in findings:
                if finding.category == "wrong-values":
                    finding.direction = "see the race finding first: the same inputs gave different results"
                if finding.category in ("precision", "error-pattern") and finding.severity == "error":
                    finding.severity = "warning"
                    finding.evidence.append("the same inputs gave different results: this may be the race's doing")
            findings[1:1] = repeat
        else:
            findings += repeat
    if status == "ok":
        perf, bound = performance_findings(evaluation, source)
        findings += perf
        findings += cheating_findings(evaluation, source)  # permissive-policy warnings
    findings += _tool_findings(evaluation, source)
    rank = {name: i for i, name in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: rank.get(f.severity, len(rank)))  # stable: each part's own order stays
    return Diagnosis(status=status, summary=_summary(evaluation, findings, bound), findings=findings,
                     focus=_focus(evaluation, bound, findings), bound=bound)
