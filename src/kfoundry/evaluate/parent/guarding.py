"""Where the evaluation cascade consults the guard: before the candidate runs (its source), after
its correctness trials (what ran, and the guard's extra runs), and after timing."""

from __future__ import annotations

from typing import Any

from kfoundry.guard.findings import Finding
from kfoundry.guard.policy import cheating_message, dynamic_findings, physical_floor_ms, split
from kfoundry.guard.static import check_source
from kfoundry.types import Evaluation


def _record(evaluation: Evaluation, failures: list[Finding], warnings: list[Finding]) -> None:
    guard = evaluation.guard
    guard.setdefault("findings", []).extend(f.__dict__ | {"advice": f.advice} for f in failures)
    guard.setdefault("warnings", []).extend(f.__dict__ | {"advice": f.advice} for f in warnings)
    for finding in warnings:
        evaluation.warnings.append(f"guard (permissive): {finding.render()}")


def fail_with(evaluation: Evaluation, failures: list[Finding], warnings: list[Finding] = ()) -> bool:
    """Record the findings; with any failure the verdict is `cheating`. True if it stays ok."""
    _record(evaluation, failures, list(warnings))
    if failures:
        evaluation.status = "cheating"
        evaluation.message = cheating_message(failures)
        return False
    return True


def static_guard(evaluation: Evaluation, source: str, policy: str) -> bool:
    evaluation.guard["policy"] = policy
    failures, warnings = split(check_source(source, evaluation.candidate), policy)
    if failures:
        evaluation.phase = "guard"
    return fail_with(evaluation, failures, warnings)


def dynamic_guard(evaluation: Evaluation, report: dict[str, Any], checks, policy: str, weak: dict[str, Any]) -> bool:
    """What ran, and the guard's extra runs: kernels off, new data, moved data, outliers. `weak`: what the
    judge found weak in the problem (the prepared problem's record)."""
    evaluation.guard.update({key: report.get(key) for key in (
        "launches_per_trial", "extension_calls", "compute_ops", "kernel_names", "kernels", "streams",
        "library_kernels", "profile_error", "graph_replays") if key in report})
    findings = dynamic_findings(report)
    if not weak.get("random"):
        # Input-independent problems need no exception: the ghost run poisons whatever forward allocates
        # uninitialised, so an earlier call's answer left in memory cannot pass. Near-zero ones do: a
        # kernel that accumulates into torch.zeros leaves the right answer with its launches skipped.
        ghost = ghost_finding(checks) if not weak.get("near_zero") else None
        if ghost is not None:
            findings.append(ghost)
        for label, what in (("cache refill", "new data written into the same input tensors"),
                            ("cache moved", "the new data in new tensors")):
            if checks.passed(label) is False:
                findings.append(Finding("output-caching", f"wrong on {what}, right on the trials: the output does "
                                        "not follow its inputs"))
                break
        if checks.passed("outliers") is False:
            findings.append(Finding("outliers", "right on the trials, wrong once sparse large values are placed in "
                                    "the inputs"))
    failures, warnings = split(findings, policy)
    return fail_with(evaluation, failures, warnings)


def ghost_finding(checks) -> Finding | None:
    """The ghost run's verdict: right with the kernels turned off means they do not make the output,
    unless the output is a tensor the model holds and the kernels rewrite it ("ghost kept")."""
    if not checks.passed("ghost") or checks.passed("ghost kept"):
        return None
    off = ("with its kernels turned off (Triton launches skipped, extension results poisoned, every tensor its "
           "forward allocated uninitialised filled with NaN)")
    if checks.passed("ghost kept") is False:
        return Finding("ghost-replay", f"{off} the candidate still returned the right output: a tensor it keeps "
                       "between calls, which its kernels do not rewrite (poisoned, it came back poisoned)")
    return Finding("ghost-replay", f"{off} the candidate still returned the right output")


def timing_guard(evaluation: Evaluation, policy: str) -> bool:
    """GPU: work the events did not see, and times below what the hardware allows."""
    timing, findings = evaluation.timing, []
    stats = timing.candidate
    if stats is not None and stats.host_flagged_trials > stats.trials // 2:
        findings.append(Finding(
            "side-stream", f"in {stats.host_flagged_trials} of {stats.trials} timed trials the host clock saw far more "
            f"time than CUDA events on the current stream (events {stats.event_median_ms:.4g} ms, host "
            f"{stats.host_median_ms:.4g} ms median)"))
    facts, cost = evaluation.device_facts, evaluation.cost
    if stats is not None and facts is not None and cost is not None:
        from kfoundry.evaluate.shared.device_facts import datasheet_for

        sheet = datasheet_for(facts.name)
        floor = physical_floor_ms(cost.input_bytes, cost.output_bytes, facts.l2_bytes,
                                  [facts.peak_bandwidth_gbs or 0.0, sheet[0] if sheet else 0.0])
        evaluation.guard["physical_floor_ms"] = floor
        below_reference = timing.eager_ms is not None and floor is not None and timing.eager_ms < floor
        if floor is not None and stats.median_ms < floor and not below_reference:
            findings.append(Finding(
                "physical-limit", f"{stats.median_ms:.4g} ms is below {floor:.4g} ms, the time to read the inputs and "
                f"write the outputs once at {max(facts.peak_bandwidth_gbs or 0, sheet[0] if sheet else 0):.0f} GB/s"))
    failures, warnings = split(findings, policy)
    return fail_with(evaluation, failures, warnings)
