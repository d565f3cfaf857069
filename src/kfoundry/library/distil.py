"""Insights derived by rule from recorded steps: per (problem kind, expert, diagnosis category), how
often the expert's child improved on its parent, and by how much. Only measured steps count (see `measured`):
a group with too few of them makes no insight, so a run that timed nothing teaches nothing."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Any

from kfoundry.library.similarity import kind_label


# How kfoundry.evaluate.shared.device_facts.cpu_facts names a CPU ("AMD EPYC 7B13 (2 cores)"). Libraries written before
# untimed speedups were stored as None hold a CPU run's 1.0 fitness as "1.00x -> 1.00x": the device tells them apart.
CPU_DEVICE_SUFFIX = " cores)"


def on_cpu(device: str | None) -> bool:
    return bool(device) and device.endswith(CPU_DEVICE_SUFFIX)


def measured(step: dict[str, Any]) -> bool:
    """Whether a step says something: its child failed (the verdict is the measurement) or was timed. A child
    that passed where nothing was timed (a CPU run) is unmeasured, whatever speedup an older version stored."""
    if step.get("outcome") != "ok":
        return True
    return step.get("speedup_after") is not None and not on_cpu(step.get("device"))


def improved(step: dict[str, Any]) -> bool:
    after, before = step.get("speedup_after"), step.get("speedup_before")
    if step.get("outcome") != "ok" or after is None:
        return False
    return before is None or after > before


def gain(step: dict[str, Any]) -> float:
    """Child over parent speedup, or the child's own speedup when the parent had none."""
    before, after = step.get("speedup_before"), step["speedup_after"]
    return after / before if before else after


def rule_insights(steps: list[dict[str, Any]], min_support: int = 2) -> list[dict[str, Any]]:
    """[{key, kind, text, evidence (step ids), signature}] for groups of at least min_support measured steps;
    unmeasured steps are neither counted nor evidence."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for step in filter(measured, steps):
        for category in step.get("diagnosis") or ["none"]:
            # the kind as this version labels it: steps stored under an older label join their class's group
            kind = kind_label(step.get("signature") or {}) or step.get("kind") or "other"
            groups[(kind, step["expert"], category)].append(step)
    insights = []
    for (kind, expert, category), members in sorted(groups.items()):
        if len(members) < min_support:
            continue
        wins = [s for s in members if improved(s)]
        devices = ", ".join(sorted({s["device"] for s in members if s.get("device")})) or "device unknown"
        what = "candidates" if category == "none" else f"{category} candidates"
        if wins:
            median = statistics.median(gain(s) for s in wins)
            text = (f"On {kind} problems the {expert} expert improved {what} {len(wins)} of {len(members)} "
                    f"times, median {median:.2f}x ({devices}).")
        else:
            outcomes = ", ".join(f"{o} {n}" for o, n in Counter(s["outcome"] for s in members).most_common())
            text = (f"On {kind} problems the {expert} expert did not improve {what} in {len(members)} tries "
                    f"(outcomes: {outcomes}; {devices}).")
        first = members[0].get("signature") or {}
        insights.append({
            "key": f"{kind}|{expert}|{category}",
            "kind": kind,
            "text": text,
            "evidence": [s["id"] for s in members],
            "signature": {k: first[k] for k in ("kind", "ops", "compute_ops", "text") if k in first} or {"kind": kind},
        })
    return insights
