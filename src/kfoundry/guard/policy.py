"""From findings to a verdict: which findings fail a candidate under each policy, and the message."""

from __future__ import annotations

from typing import Any

from kfoundry.guard.findings import PERMISSIVE_WARNINGS, POLICIES, Finding

# GPU kernels whose presence is evidence of a side stream: more than one stream in one forward
SIDE_STREAM_MIN_STREAMS = 2
# the physical floor is taken at this much above the device's best bandwidth figure
BANDWIDTH_MARGIN = 1.1


def check_policy(policy: str) -> None:
    if policy not in POLICIES:
        from kfoundry.errors import UsageError

        raise UsageError(f"unknown policy {policy!r}: use one of {', '.join(POLICIES)}")


def split(findings: list[Finding], policy: str) -> tuple[list[Finding], list[Finding]]:
    """(failures, warnings): under `permissive`, PyTorch compute is a warning, not a failure."""
    if policy == "permissive":
        return ([f for f in findings if f.rule not in PERMISSIVE_WARNINGS],
                [f for f in findings if f.rule in PERMISSIVE_WARNINGS])
    return list(findings), []


def cheating_message(failures: list[Finding]) -> str:
    first = failures[0]
    text = first.render()
    if first.advice:
        text += f" — {first.advice}"
    others = sorted({f.rule for f in failures[1:]} - {first.rule})
    if len(failures) > 1:
        text += f" (and {len(failures) - 1} more finding(s)" + (f": {', '.join(others)}" if others else "") + ")"
    return text


def dynamic_findings(report: dict[str, Any]) -> list[Finding]:
    """Findings from what the worker saw while the candidate ran (its `guard` report)."""
    findings = []
    changes = report.get("state_changes") or []
    if changes:
        findings.append(Finding("global-state-change", "global state changed while the candidate ran: "
                                + "; ".join(changes), evidence=changes))
    launches = report.get("launches_per_trial") or []
    if launches and min(launches) == 0:
        findings.append(Finding(
            "no-custom-kernel",
            f"no Triton kernel or extension function was launched in {launches.count(0)} of {len(launches)} "
            "correctness runs", evidence=[f"launches per run: {launches}"]))
    compute = report.get("compute_ops") or []
    if compute:
        ops = report.get("ops") or {}
        evidence = [f"aten::{name} x{ops.get(name, 1)}" for name in compute]
        findings.append(Finding("aten-compute", "PyTorch compute ran during forward, outside the candidate's kernels: "
                                + ", ".join(evidence[:12]), evidence=evidence))
    library = report.get("library_kernels") or []
    if library:
        findings.append(Finding("library-kernel", "library kernels ran during forward: " + ", ".join(library[:6]),
                                evidence=library))
    streams = report.get("streams") or []
    if len(streams) >= SIDE_STREAM_MIN_STREAMS:
        findings.append(Finding("side-stream", f"the forward's kernels ran on {len(streams)} streams",
                                evidence=[f"streams {streams}"]))
    return findings


def physical_floor_ms(input_bytes: int, output_bytes: int, l2_bytes: int | None,
                      bandwidth_gbs: list[float]) -> float | None:
    """The least time to read the inputs from memory and write the outputs once (outputs that fit
    in L2 may stay there): below it, a measurement is impossible."""
    best = max((b for b in bandwidth_gbs if b), default=None)
    if not best:
        return None
    moved = input_bytes + max(0, output_bytes - (l2_bytes or 0))
    return moved / (best * 1e9 * BANDWIDTH_MARGIN) * 1e3
