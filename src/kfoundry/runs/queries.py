"""Read-only questions about a run: the best candidate, a lineage, the history, the totals."""

from __future__ import annotations

import json
import sqlite3
from bisect import bisect_right
from typing import Any

# metric -> True when larger is better
METRICS = {"speedup_eager": True, "speedup_compile": True, "runtime_ms": False}


def candidate_dict(row: sqlite3.Row) -> dict[str, Any]:
    data = dict(row)
    data["parent_ids"] = json.loads(data["parent_ids"])
    return data


def evaluation_dict(row: sqlite3.Row) -> dict[str, Any]:
    data = dict(row)
    for key in ("evaluation_json", "diagnosis_json"):
        data[key.removesuffix("_json")] = json.loads(data.pop(key)) if data.get(key) else None
    return data


def best(conn: sqlite3.Connection, metric: str = "speedup_eager", candidate_id: int | None = None) -> dict[str, Any] | None:
    """The best verified (status ok) evaluation by `metric` (of `candidate_id` only, if given), with its
    candidate; None if none. Where nothing was timed (CPU), the first verified candidate."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {tuple(METRICS)}, not {metric!r}")
    order = "DESC" if METRICS[metric] else "ASC"
    # metric is one of METRICS' keys, so formatting it into the SQL is safe.
    row = conn.execute(
        f"SELECT e.id AS evaluation_id, e.candidate_id, e.status, e.message, e.runtime_ms, e.eager_ms,"
        f" e.compile_ms, e.speedup_eager, e.speedup_compile, e.trials, e.trials_passed,"
        f" e.evaluation_json, c.source, c.source_hash, c.parent_ids, c.expert, c.island,"
        f" c.generation, c.origin FROM evaluations e JOIN candidates c ON c.id = e.candidate_id"
        f" WHERE e.status = 'ok'{' AND e.candidate_id = ?' if candidate_id is not None else ''}"
        f" ORDER BY e.{metric} IS NULL, e.{metric} {order}, e.id LIMIT 1",
        () if candidate_id is None else (candidate_id,)).fetchone()
    if row is None:
        return None
    data = dict(row)
    data["parent_ids"] = json.loads(data["parent_ids"])
    data["evaluation"] = json.loads(data.pop("evaluation_json"))
    return data


def verified_in_order(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Verified (status ok) evaluations in the order they finished, each with its speedup vs eager and its
    candidate's expert, generation and parents."""
    rows = conn.execute(
        "SELECT e.id AS evaluation_id, e.candidate_id, e.speedup_eager, c.expert, c.generation, c.parent_ids"
        " FROM evaluations e JOIN candidates c ON c.id = e.candidate_id"
        " WHERE e.status = 'ok' AND e.finished_at IS NOT NULL ORDER BY e.finished_at, e.id").fetchall()
    return [candidate_dict(row) for row in rows]


def lineage(conn: sqlite3.Connection, candidate_id: int) -> list[dict[str, Any]]:
    """The candidate and its ancestors back to the root(s), nearest first (breadth-first over
    every parent, each once), with each one's best verified speedup."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    queue = [candidate_id]
    while queue:
        current = queue.pop(0)
        if current in seen:
            continue
        seen.add(current)
        row = conn.execute(
            "SELECT c.id, c.parent_ids, c.expert, c.origin, c.island, c.generation, c.source_hash,"
            " (SELECT status FROM evaluations WHERE candidate_id = c.id AND finished_at IS NOT NULL"
            "  ORDER BY id DESC LIMIT 1) AS status,"
            " (SELECT MAX(speedup_eager) FROM evaluations WHERE candidate_id = c.id AND status = 'ok')"
            "  AS speedup_eager FROM candidates c WHERE c.id = ?", (current,)).fetchone()
        if row is None:
            if current == candidate_id:
                raise KeyError(f"no candidate {candidate_id}")
            continue
        item = candidate_dict(row)
        out.append(item)
        queue.extend(item["parent_ids"])
    return out


def history(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Per generation: candidates, finished evaluations, verified ones, best speedups (in the
    generation and so far)."""
    per_gen: dict[int, dict[str, Any]] = {}
    for gen, count in conn.execute("SELECT generation, COUNT(*) FROM candidates GROUP BY generation"):
        per_gen[gen] = {"generation": gen, "candidates": count, "evaluations": 0, "correct": 0,
                        "best_speedup_eager": None, "best_speedup_compile": None}
    for row in conn.execute(
            "SELECT c.generation, e.status, e.speedup_eager, e.speedup_compile FROM evaluations e"
            " JOIN candidates c ON c.id = e.candidate_id WHERE e.finished_at IS NOT NULL"):
        entry = per_gen[row["generation"]]
        entry["evaluations"] += 1
        if row["status"] == "ok":
            entry["correct"] += 1
            for key in ("speedup_eager", "speedup_compile"):
                entry[f"best_{key}"] = _max(entry[f"best_{key}"], row[key])
    out, so_far = [], {"speedup_eager": None, "speedup_compile": None}
    for _, entry in sorted(per_gen.items()):
        for key, best_yet in so_far.items():
            so_far[key] = _max(best_yet, entry[f"best_{key}"])
            entry[f"best_{key}_so_far"] = so_far[key]
        out.append(entry)
    return out


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def totals(conn: sqlite3.Connection) -> dict[str, Any]:
    """Counts, correctness rate, LLM tokens and cost (unknown costs counted apart), wall time."""
    ev = conn.execute(
        "SELECT COUNT(finished_at) AS finished, COUNT(*) - COUNT(finished_at) AS in_flight,"
        " SUM(status = 'ok') AS ok FROM evaluations").fetchone()
    statuses = dict(conn.execute("SELECT status, COUNT(*) FROM evaluations"
                                 " WHERE finished_at IS NOT NULL GROUP BY status").fetchall())
    llm = conn.execute(
        "SELECT COUNT(*) AS calls, SUM(failure IS NOT NULL) AS failed,"
        " SUM(cost_usd) AS cost, SUM(failure IS NULL AND cost_usd IS NULL) AS unknown_cost,"
        " SUM(input_tokens) AS input_tokens, SUM(output_tokens) AS output_tokens,"
        " SUM(failure IS NULL AND input_tokens IS NULL AND output_tokens IS NULL) AS unknown_tokens"
        " FROM llm_calls").fetchone()
    finished, ok = ev["finished"], ev["ok"] or 0
    return {
        "candidates": conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0],
        "evaluations": finished,
        "in_flight": ev["in_flight"],
        "correct": ok,
        "correctness_rate": ok / finished if finished else None,
        "statuses": statuses,
        "llm_calls": llm["calls"],
        "llm_failed_calls": llm["failed"] or 0,
        # cost of the calls whose price is known; calls with an unknown price are counted apart
        "cost_usd": llm["cost"],
        "unknown_cost_calls": llm["unknown_cost"] or 0,
        "input_tokens": llm["input_tokens"],
        "output_tokens": llm["output_tokens"],
        "unknown_token_calls": llm["unknown_tokens"] or 0,
        "wall_time_s": wall_time_s(conn),
    }


def wall_time_s(conn: sqlite3.Connection) -> float:
    """Time the run was active: per session (create or resume), from its start to its last
    recorded activity, summed, so the gap before a resume does not count."""
    starts = [r[0] for r in conn.execute("SELECT ts FROM events WHERE kind = 'session_start' ORDER BY ts")]
    if not starts:
        return 0.0
    last = [0.0] * len(starts)
    stamps = conn.execute(
        "SELECT ts FROM events UNION ALL SELECT created_at FROM candidates"
        " UNION ALL SELECT started_at FROM evaluations UNION ALL SELECT finished_at FROM evaluations"
        " WHERE finished_at IS NOT NULL UNION ALL SELECT created_at FROM llm_calls")
    for (ts,) in stamps:
        session = bisect_right(starts, ts) - 1
        if session >= 0:
            last[session] = max(last[session], ts - starts[session])
    return sum(last)
