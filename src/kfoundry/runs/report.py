"""A run's HTML report (report.html): the best kernel and its diff from the first correct one,
the search's progress, the experts and the LLM spend, the best's lineage and its place on the
roofline, and the run explorer (report_explorer: every candidate by island, the MAP-Elites grid, the
migrations; a click shows a candidate's code, diff, diagnosis, prompt and reply). One self-contained
file: styles, plots (SVG data URIs), code, data (JSON) and scripts inline, no network.

Read from the run store (and result.json when present) only: `write_report(run_dir)`."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from markupsafe import Markup

from kfoundry.llm.cost_text import cost_text
from kfoundry.runs.credit import move_text
from kfoundry.runs import report_plots as plots
from kfoundry.runs.report_data import gather
from kfoundry.runs.report_explorer import explorer_data, explorer_json
from kfoundry.runs.report_html import code_html, diff_html, diff_text, render_page

REPORT_NAME = "report.html"
SECTIONS = ("summary", "best-kernel", "explorer", "progress", "credit", "experts", "llm", "lineage", "roofline",
            "diagnosis")


def _when(timestamp: float | None) -> str:
    if not timestamp:
        return "-"
    return dt.datetime.fromtimestamp(timestamp, tz=dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def problem_label(meta: dict[str, Any]) -> str:
    """The problem's file name, with its directory when the name alone says little (problem.py)."""
    name = meta.get("problem_name") or "problem"
    path = Path(meta.get("problem_path") or name)
    return f"{path.parent.name}/{name}" if name == "problem.py" and path.parent.name else name


def _best_section(data: dict[str, Any]) -> dict[str, Any] | None:
    best = data["best"]
    if best is None:
        return None
    candidate, evaluation = best["candidate"], best["evaluation"] or {}
    first = data["first_correct"]
    section = {
        "kind": best["kind"], "candidate": candidate, "evaluation": evaluation,
        "timing": evaluation.get("timing") or {}, "correctness": evaluation.get("correctness") or {},
        "code": code_html(candidate["source"]), "diff": None, "diff_note": "",
        "checked": _checked_lines(data, candidate["id"], evaluation),
    }
    if first is None or first["candidate"]["id"] == candidate["id"]:
        section["diff_note"] = "The best candidate is the first correct one: there is no earlier version to compare."
    else:
        text = diff_text(first["candidate"]["source"], candidate["source"],
                         f"candidate {first['candidate']['id']} (first correct)", f"candidate {candidate['id']} (best)")
        if text:
            section["diff"] = diff_html(text)
        else:
            section["diff_note"] = "The first correct candidate has the same code."
    return section


def _checked_lines(data: dict[str, Any], candidate_id: int, evaluation: dict[str, Any]) -> list[str]:
    """Where the best's verdict holds: where its precision was checked, and whether it holds at other sizes."""
    from kfoundry.evaluate.parent.precision_check import describe
    from kfoundry.runs.outputs import graph_note
    from kfoundry.types import SizeCheck

    lines = [describe(evaluation.get("precision"))]
    best = (data["result"] or {}).get("best") or {}
    if best.get("candidate_id") == candidate_id and best.get("other_sizes"):
        check = SizeCheck.from_dict(best["other_sizes"])
        sizes = ", ".join(f"{k}={v}" for k, v in check.verified_at.items())
        lines.append(f"verified at {sizes}; {check.summary()}" if sizes else check.summary())
    lines.append(graph_note(evaluation))
    return [line for line in lines if line]


def _diagnosis(data: dict[str, Any]) -> dict[str, Any] | None:
    best = data["best"]
    diagnosis = best and best["diagnosis"]
    if not diagnosis:
        return None
    findings = [{"severity": f.get("severity"), "category": f.get("category"), "title": f.get("title"),
                 "direction": f.get("direction") or ""} for f in diagnosis.get("findings") or []]
    return {"summary": diagnosis.get("summary") or "", "focus": diagnosis.get("focus"), "bound": diagnosis.get("bound"),
            "findings": findings}


def _floor_section(data: dict[str, Any]) -> dict[str, Any] | None:
    """The floor and, per time (the best's, eager's, torch.compile's), the ms and the fraction of the floor."""
    from kfoundry.bench.figures import FLOOR_MEANING, FLOOR_NAMES, share_text

    point = data["floor"]
    if point is None:
        return None
    timing = ((data["best"] or {}).get("evaluation") or {}).get("timing") or {}
    times = (timing.get("runtime_ms"), timing.get("eager_ms"), timing.get("compile_ms"))
    rows = [(name, ms, share_text(point[key])) for (key, name), ms in zip(FLOOR_NAMES.items(), times, strict=True)]
    return {"floor": point["floor"], "rows": rows, "ours": share_text(point["ours_of_floor"]),
            "meaning": FLOOR_MEANING[0].upper() + FLOOR_MEANING[1:]}


def _credit_section(data: dict[str, Any]) -> dict[str, Any]:
    """Where the speed came from: the improvements with their moves in a few words, generation 0's best, the gain."""
    found = data["credit"]
    rows = [{**step, "move_text": move_text(step["move"])} for step in found["improvements"]]
    return {**found, "rows": rows}


def _untimed_reason(data: dict[str, Any]) -> str:
    best = data["best"]
    timing = ((best or {}).get("evaluation") or {}).get("timing") or {}
    return timing.get("reason") or "no candidate was timed"


def _stop_reason(events: list[dict[str, Any]]) -> str | None:
    for event in reversed(events):
        if event.get("kind") in ("stop", "run_end", "stopped") and event.get("reason"):
            return str(event["reason"])
    return None


def build_context(run_dir: str | Path) -> dict[str, Any]:
    """The data and the plots of the report (what the template renders)."""
    data = gather(run_dir)
    meta, labels = data["meta"], data["labels"]
    evaluations = data["evaluations"]
    best_id = data["best"]["candidate"]["id"] if data["best"] else None
    explorer = explorer_data(run_dir, best_id, [step["id"] for step in data["lineage"]])
    return {
        "title": f"Kernel Foundry report: {problem_label(meta)}",
        "data": data,
        "meta": meta,
        "created": _when(meta.get("created_at")),
        "labels": labels,
        "totals": data["totals"],
        "cost_text": cost_text(data["totals"]["cost_usd"], data["totals"]["unknown_cost_calls"]),
        "best": _best_section(data),
        "timed": data["timed"],
        "untimed_reason": _untimed_reason(data),
        "plots": {
            "speedup": plots.speedup_over_evaluations(evaluations),
            "speedup_compile": plots.speedup_over_evaluations(evaluations, "speedup_compile"),
            "correctness": plots.correctness_over_time(evaluations),
            "experts": plots.expert_outcomes(data["experts"]),
            "roofline": plots.roofline(data["roofline"], labels["device"]),
        },
        "diagnosis": _diagnosis(data),
        "floor": _floor_section(data),
        "credit": _credit_section(data),
        "stop_reason": _stop_reason(data["events"]),
        "sections": SECTIONS,
        "explorer": explorer,
        "explorer_json": Markup(explorer_json(explorer)),
    }


def render_report(run_dir: str | Path) -> str:
    return render_page("report.html.j2", scripts=("explorer.js",), **build_context(run_dir))


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the report (default RUN_DIR/report.html) and return its path."""
    run_dir = Path(run_dir)
    path = Path(out) if out is not None else run_dir / REPORT_NAME
    html = render_report(run_dir)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, path)
    return path
