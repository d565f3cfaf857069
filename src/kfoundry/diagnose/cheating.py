"""Guard findings (kfoundry.guard) as diagnosis findings: the rule, its evidence, what to do instead."""

from __future__ import annotations

from typing import Any

from kfoundry.guard.findings import RULES
from kfoundry.types import DiagnosticFinding, Evaluation, SourceLocation

# what a fixer should do, beyond the rule's one-line advice
MORE: dict[str, str] = {
    "torch-compute": "allocation, views and dtype casts are fine; every arithmetic op must be inside a kernel "
                     "(a pointwise tail belongs in the kernel's epilogue)",
    "nn-compute-layer": "keep the nn layer only as a holder of parameters (self.layer.weight) and launch your "
                        "kernel on them",
    "aten-compute": "look for tensor operators (+, *, @), tensor methods (.sum(), .exp()) and F.* calls in forward",
    "library-kernel": "a matmul or convolution needs its own tiled kernel (tl.dot in Triton)",
    "ghost-replay": "the output must come from the kernels' stores in this call, not from a tensor kept or "
                    "filled outside them",
    "output-caching": "do not keep outputs or inputs on self; recompute on every call",
    "side-stream": "no torch.cuda.Stream, no non-default stream in launches",
    "physical-limit": "check that every element is read and every output written",
    "outliers": "do not sample, skip or approximate elements of the input",
    "no-custom-kernel": "forward must launch at least one @triton.jit kernel or a load_inline function",
}


def _location(item: dict[str, Any], path: str | None, lines: list[str]) -> SourceLocation | None:
    line = item.get("line")
    if not line:
        return None
    text = lines[line - 1].strip() if 0 < line <= len(lines) else None
    return SourceLocation(file=path, line=line, text=text)


def cheating_findings(evaluation: Evaluation, source: str | None) -> list[DiagnosticFinding]:
    """One finding per guard failure (severity error) and permissive warning (severity warning)."""
    lines = (source or "").splitlines()
    out = []
    for key, severity in (("findings", "error"), ("warnings", "warning")):
        for item in evaluation.guard.get(key) or []:
            rule = item.get("rule", "?")
            what, advice = RULES.get(rule, ("", item.get("advice") or ""))
            direction = advice + (f"; {MORE[rule]}" if rule in MORE else "")
            evidence = [item.get("message", "")] + [str(e) for e in item.get("evidence") or []]
            out.append(DiagnosticFinding(
                category="cheating" if severity == "error" else "guard-warning",
                severity=severity,
                title=f"[{rule}] {what or item.get('message', '')}",
                evidence=[e for e in evidence if e],
                location=_location(item, evaluation.candidate or None, lines),
                direction=direction,
                data={"rule": rule, "policy": evaluation.guard.get("policy")},
            ))
    return out
