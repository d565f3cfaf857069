"""What a run's report shows, read from its run store (and result.json when present): plain data,
no HTML. `gather(run_dir)` is the whole of it."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from kfoundry.llm.cost_text import cost_text
from kfoundry.runs.credit import credit
from kfoundry.runs.schema import DB_NAME, connect
from kfoundry.runs.store import RunStore

NO_TIMING = "not measured"


def _evaluations(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Finished evaluations in the order they finished, with their candidate's expert and island."""
    rows = conn.execute(
        "SELECT e.id AS evaluation_id, e.candidate_id, e.started_at, e.finished_at, e.status, e.message,"
        " e.runtime_ms, e.speedup_eager, e.speedup_compile, c.expert, c.island, c.generation, c.origin,"
        " c.parent_ids FROM evaluations e JOIN candidates c ON c.id = e.candidate_id"
        " WHERE e.finished_at IS NOT NULL ORDER BY e.finished_at, e.id").fetchall()
    out = []
    for index, row in enumerate(rows, start=1):
        item = dict(row)
        item["parent_ids"] = json.loads(item["parent_ids"])
        item["index"] = index
        out.append(item)
    return out


def _llm_calls(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT candidate_id, expert, provider, model, failure, input_tokens, output_tokens,"
                        " cost_usd, latency_s FROM llm_calls ORDER BY id").fetchall()
    return [dict(row) for row in rows]


def _candidate_experts(conn: sqlite3.Connection) -> dict[str, int]:
    return dict(conn.execute("SELECT expert, COUNT(*) FROM candidates GROUP BY expert").fetchall())


def _latest_evaluation(conn: sqlite3.Connection, candidate_id: int) -> dict[str, Any] | None:
    row = conn.execute("SELECT id, status, speedup_eager, diagnosis_json FROM evaluations WHERE candidate_id = ?"
                       " AND finished_at IS NOT NULL ORDER BY id DESC LIMIT 1", (candidate_id,)).fetchone()
    if row is None:
        return None
    item = dict(row)
    item["diagnosis"] = json.loads(item.pop("diagnosis_json")) if item.get("diagnosis_json") else None
    return item


def _best_speedups(evaluations: list[dict[str, Any]]) -> dict[int, float | None]:
    """Per candidate, its best verified speedup vs eager (None: correct, not timed; absent: never correct)."""
    best: dict[int, float | None] = {}
    for item in evaluations:
        if item["status"] != "ok":
            continue
        cid, value = item["candidate_id"], item["speedup_eager"]
        current = best.get(cid)
        best[cid] = value if current is None else (current if value is None else max(current, value))
    return best


# -- sections -------------------------------------------------------------------------------------

def expert_stats(evaluations: list[dict[str, Any]], proposed: dict[str, int],
                 llm_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per expert: candidates, evaluations, correct ones, how often a child beat its parent, its
    best speedup, and its LLM calls, tokens and cost."""
    speedups = _best_speedups(evaluations)
    stats: dict[str, dict[str, Any]] = {}

    def entry(expert: str) -> dict[str, Any]:
        return stats.setdefault(expert, {
            "expert": expert, "candidates": proposed.get(expert, 0), "evaluations": 0, "correct": 0,
            "with_parent": 0, "improved": 0, "best_speedup": None, "statuses": {}, "llm_calls": 0,
            "llm_failed": 0, "input_tokens": None, "output_tokens": None, "unknown_token_calls": 0, "cost_usd": None,
            "unknown_cost_calls": 0})

    for item in evaluations:
        row = entry(item["expert"])
        row["evaluations"] += 1
        row["statuses"][item["status"]] = row["statuses"].get(item["status"], 0) + 1
        ok = item["status"] == "ok"
        row["correct"] += ok
        if ok and item["speedup_eager"] is not None:
            row["best_speedup"] = max(row["best_speedup"] or 0.0, item["speedup_eager"])
        if item["parent_ids"]:
            row["with_parent"] += 1
            parent = item["parent_ids"][0]
            if ok and (parent not in speedups or (speedups[parent] is not None and item["speedup_eager"] is not None
                                                  and item["speedup_eager"] > speedups[parent])):
                row["improved"] += 1  # repaired a failing parent, or faster than it
    for expert in proposed:
        entry(expert)
    for call in llm_calls:
        row = entry(call["expert"])
        row["llm_calls"] += 1
        row["llm_failed"] += call["failure"] is not None
        _add_tokens(row, call)
        if call["cost_usd"] is not None:
            row["cost_usd"] = (row["cost_usd"] or 0.0) + call["cost_usd"]
        elif call["failure"] is None:
            row["unknown_cost_calls"] += 1
    for row in stats.values():
        row["correctness_rate"] = row["correct"] / row["evaluations"] if row["evaluations"] else None
        row["improve_rate"] = row["improved"] / row["with_parent"] if row["with_parent"] else None
        row["cost_text"] = cost_text(row["cost_usd"], row["unknown_cost_calls"]) if row["llm_calls"] else "-"
    return sorted(stats.values(), key=lambda r: (-r["evaluations"], r["expert"]))


def _add_tokens(row: dict[str, Any], call: dict[str, Any]) -> None:
    """Token counts the provider reported; a reply without them is counted apart, never as 0."""
    for key in ("input_tokens", "output_tokens"):
        if call[key] is not None:
            row[key] = (row[key] or 0) + call[key]
    if call["failure"] is None and call["input_tokens"] is None and call["output_tokens"] is None:
        row["unknown_token_calls"] += 1


def llm_by_model(llm_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    models: dict[str, dict[str, Any]] = {}
    for call in llm_calls:
        name = call["model"] or call["provider"] or ("no reply (failed calls)" if call["failure"] else "unknown")
        row = models.setdefault(name, {"model": name, "calls": 0, "failed": 0, "input_tokens": None,
                                       "output_tokens": None, "unknown_token_calls": 0, "cost_usd": None,
                                       "unknown_cost_calls": 0, "latency_s": 0.0})
        row["calls"] += 1
        row["failed"] += call["failure"] is not None
        _add_tokens(row, call)
        row["latency_s"] += call["latency_s"] or 0.0
        if call["cost_usd"] is not None:
            row["cost_usd"] = (row["cost_usd"] or 0.0) + call["cost_usd"]
        elif call["failure"] is None:
            row["unknown_cost_calls"] += 1
    for row in models.values():
        row["cost_text"] = cost_text(row["cost_usd"], row["unknown_cost_calls"])
    return sorted(models.values(), key=lambda r: -r["calls"])


def _reasons(events: list[dict[str, Any]]) -> dict[int, str]:
    """Why the router chose each candidate's expert, where the run recorded it in an event."""
    reasons = {}
    for event in events:
        cid, reason = event.get("candidate_id"), event.get("reason")
        if isinstance(cid, int) and isinstance(reason, str) and reason:
            reasons[cid] = reason
    return reasons


def lineage_steps(store: RunStore, conn: sqlite3.Connection, candidate_id: int,
                  evaluations: list[dict[str, Any]], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ancestors of a candidate, root first: per step the expert, the parent's diagnosis it
    answered, and the gain over the parent."""
    speedups = _best_speedups(evaluations)
    reasons = _reasons(events)
    members = sorted(store.lineage(candidate_id), key=lambda m: (m["generation"], m["id"]))
    steps = []
    for member in members:
        parent_id = member["parent_ids"][0] if member["parent_ids"] else None
        parent = _latest_evaluation(conn, parent_id) if parent_id is not None else None
        diagnosis = (parent or {}).get("diagnosis") or {}
        own = speedups.get(member["id"])
        gain, gain_text = None, ""
        if parent_id is None:
            gain_text = "first candidate"
        elif member["status"] != "ok":
            gain_text = f"no gain ({member['status']})"
        elif parent is None or parent_id not in speedups:
            gain_text = f"repaired (parent was {parent['status'] if parent else 'not evaluated'})"
        elif own is not None and speedups[parent_id]:
            gain = own / speedups[parent_id]
            gain_text = f"{gain:.3g}x over its parent"
        else:
            gain_text = "correct, not timed"
        steps.append({
            **member, "speedup": own, "parent_id": parent_id, "gain": gain, "gain_text": gain_text,
            "parent_status": parent["status"] if parent else None,
            "diagnosis_summary": diagnosis.get("summary") or "",
            "diagnosis_focus": diagnosis.get("focus"), "diagnosis_bound": diagnosis.get("bound"),
            "reason": reasons.get(member["id"], ""),
        })
    return steps


def roofline_point(evaluation: dict[str, Any] | None, diagnosis: dict[str, Any] | None) -> dict[str, Any]:
    """The best kernel against the device's roofs: the diagnosis's roofline finding, else the same
    computation from the evaluation's cost, device facts and runtime; `reason` when there is none."""
    if evaluation is None:
        return {"reason": "no correct candidate: nothing to place on the roofline"}
    timing = evaluation.get("timing") or {}
    if timing.get("runtime_ms") is None:
        why = timing.get("reason") or "the candidate was not timed"
        return {"reason": f"no roofline point: the run was not timed ({why})"}
    ceilings = (evaluation.get("device_facts") or {}).get("source") or "unknown"
    for finding in (diagnosis or {}).get("findings") or []:
        if finding.get("category") == "roofline" and finding.get("data"):
            return {**finding["data"], "title": finding.get("title", ""), "ceilings": ceilings}
    data = _compute_roofline(evaluation)
    if data is None:
        return {"reason": "no roofline point: the device's ceilings or the problem's cost are unknown"}
    return {**data, "title": "", "ceilings": ceilings}


def _compute_roofline(evaluation: dict[str, Any]) -> dict[str, Any] | None:
    from kfoundry.diagnose.performance import roofline
    from kfoundry.types import CorrectnessReport, DeviceFacts, Evaluation, ProblemCost, TimingReport

    cost, facts = evaluation.get("cost"), evaluation.get("device_facts")
    if not cost or not facts:
        return None
    try:
        rebuilt = Evaluation(status="ok", message="", cost=ProblemCost(**cost), device_facts=DeviceFacts(**facts),
                             timing=TimingReport(runtime_ms=evaluation["timing"]["runtime_ms"]),
                             correctness=CorrectnessReport(
                                 precision=(evaluation.get("correctness") or {}).get("precision", "fp32")))
    except TypeError:  # a record from another version of the types
        return None
    return roofline(rebuilt)


def floor_point(evaluation: dict[str, Any] | None) -> dict[str, Any] | None:
    """The problem's floor (kfoundry.bench.floor: its speed of light on the device, from the best's evaluation)
    as `floor`, and its fields (kfoundry.bench.floor.FIELDS: the fraction of it the best, eager and torch.compile
    reach); None without a best, on a CPU, or without the problem's cost."""
    from kfoundry.bench.floor import floor_fields, floor_of

    floor = floor_of(evaluation)
    if floor is None:
        return None
    timing = (evaluation or {}).get("timing") or {}
    return {"floor": floor, **floor_fields(floor, timing.get("runtime_ms"), timing.get("eager_ms"),
                                           timing.get("compile_ms"))}


def labels(meta: dict[str, Any], evaluation: dict[str, Any] | None, result: dict[str, Any] | None) -> dict[str, str]:
    """How the run's figures were obtained."""
    evaluation = evaluation or {}
    timing, correctness = evaluation.get("timing") or {}, evaluation.get("correctness") or {}
    settings = evaluation.get("settings") or {}
    run_settings = meta.get("settings") or {}
    device = (result or {}).get("device") or {}
    versions = (result or {}).get("versions") or {}
    timed = timing.get("runtime_ms") is not None

    def pick(*values: Any) -> str:
        for value in values:
            if value not in (None, ""):
                return str(value)
        return "-"

    return {
        "device": pick(timing.get("device"), (evaluation.get("device_facts") or {}).get("name"), device.get("name"),
                       evaluation.get("device")),
        "torch": pick(timing.get("torch_version"), settings.get("torch"), versions.get("torch")),
        "triton": pick(timing.get("triton_version"), settings.get("triton"), versions.get("triton")),
        "precision": pick(correctness.get("precision"), settings.get("precision"), run_settings.get("precision")),
        "tolerance": pick(correctness.get("tolerance"), settings.get("tolerance"), run_settings.get("tolerance")),
        "trials": pick(settings.get("trials"), correctness.get("trials"), run_settings.get("trials")),
        "policy": pick(settings.get("policy"), run_settings.get("policy")),
        "timing": (f"{timing.get('statistic', 'median')} of {timing.get('trials')} timed trials; {timing.get('method')}"
                   if timed else f"{NO_TIMING} ({timing.get('reason') or 'no timed candidate'})"),
        "sandbox": sandbox_label(evaluation.get("sandbox") or {}),
    }


def sandbox_label(sandbox: dict[str, Any]) -> str:
    """What held in the worker that ran the evaluation, and what the kernel lacked (then the baseline
    cache and the library were not protected from the candidates)."""
    if not sandbox:
        return "-"
    held = [f"{part}: {sandbox[part]}" for part in ("filesystem", "network", "processes") if sandbox.get(part)]
    missing = sandbox.get("missing") or []
    text = "; ".join(held) or "no restriction held"
    if missing:
        text += "; MISSING " + "; ".join(missing) + " (the baseline cache and the library were unprotected)"
    return text


def _read_result(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "result.json"
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def gather(run_dir: str | Path) -> dict[str, Any]:
    """Everything the report shows. Raises RunStoreError when run_dir holds no readable run store."""
    run_dir = Path(run_dir)
    with RunStore.open(run_dir, resume=False) as store, \
            closing(connect(run_dir / DB_NAME, configure=False)) as conn:
        meta = store.meta()
        totals = store.totals()
        events = store.events()
        evaluations = _evaluations(conn)
        llm_calls = _llm_calls(conn)
        correct = [e for e in evaluations if e["status"] == "ok"]
        first_correct = correct[0] if correct else None
        best = store.final_best()
        speed_credit = credit(store, (best or {}).get("speedup_eager"))
        best_kind = "fastest verified candidate (speedup vs eager)"
        if best is not None and best.get("speedup_eager") is None:
            best_kind = "first correct candidate (no candidate was timed)"
        elif best is None and first_correct is not None:
            best_kind = "first correct candidate (no candidate was timed)"
            best = {"candidate_id": first_correct["candidate_id"], "evaluation_id": first_correct["evaluation_id"]}
        best_record = store.evaluation(best["evaluation_id"]) if best else None
        best_candidate = store.candidate(best["candidate_id"]) if best else None
        first_candidate = store.candidate(first_correct["candidate_id"]) if first_correct else None
        lineage = lineage_steps(store, conn, best["candidate_id"], evaluations, events) if best else []
        experts = expert_stats(evaluations, _candidate_experts(conn), llm_calls)
    result = _read_result(run_dir)
    best_evaluation = (best_record or {}).get("evaluation")
    best_diagnosis = (best_record or {}).get("diagnosis")
    return {
        "run_dir": str(run_dir),
        "meta": meta,
        "totals": totals,
        "result": result,
        "evaluations": evaluations,
        "llm_calls": llm_calls,
        "events": events,
        "llm_models": llm_by_model(llm_calls),
        "experts": experts,
        "best": None if best is None else {
            "kind": best_kind, "candidate": best_candidate, "record": best_record,
            "evaluation": best_evaluation, "diagnosis": best_diagnosis},
        "first_correct": None if first_candidate is None else {
            "candidate": first_candidate, "evaluation_id": first_correct["evaluation_id"]},
        "lineage": lineage,
        "credit": speed_credit,
        "roofline": roofline_point(best_evaluation, best_diagnosis),
        "floor": floor_point(best_evaluation),
        "labels": labels(meta, best_evaluation, result),
        "timed": any(e["speedup_eager"] is not None for e in correct),
        "islands": sorted({e["island"] for e in evaluations}),
    }
