"""The run explorer's data (report.html's interactive view): every candidate with its island, generation,
verdict, speedup, MAP-Elites cell, code, diff from its parent, diagnosis and the LLM calls (prompt and
reply) that made it; the migrations between islands; the islands' final populations.

Read from the run store and the run folder's prompts/ only. The MAP-Elites cell is not stored: it is a
function of a candidate's code and its diagnosis's bound (kfoundry.search.features), both stored, so it
is computed here exactly as the search computed it. `explorer_data(run_dir)` is the whole of it; the page
embeds it as JSON (`explorer_json`) for report_assets/explorer.js."""

from __future__ import annotations

import difflib
import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from kfoundry.runs.schema import DB_NAME, connect
from kfoundry.runs.store import finite

# (key, label) of the MAP-Elites cell's dimensions, in kfoundry.search.features.cell's order
FEATURES = (("backend", "backend"), ("kernels", "kernels"), ("dot", "tl.dot"), ("tile", "tile size"),
            ("warps", "warps"), ("bound", "bound"))
# the order of each dimension's values on the grid's axes (values not listed follow, sorted)
FEATURE_ORDER = {
    "backend": ["torch", "triton", "cuda"], "kernels": ["0", "1", "2", "3+"], "dot": ["no", "yes"],
    "tile": ["none", "small", "medium", "large"], "warps": ["default", "low", "mid", "high"],
    "bound": ["unknown", "memory", "compute", "launch", "latency"],
}
MAX_TEXT = 200_000  # characters of one prompt, reply or source kept in the page; the rest is cut, and said so
_PROMPT = re.compile(r"\A# system\n\n(?P<system>.*?)\n\n# user\n\n(?P<user>.*?)\n?\Z", re.DOTALL)


class _Strings:
    """One copy of each long text (a system prompt repeats in every call of its expert)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self._index: dict[str, int] = {}

    def add(self, text: str | None) -> int | None:
        if text is None:
            return None
        if len(text) > MAX_TEXT:
            text = text[:MAX_TEXT] + f"\n\n[... cut here: {len(text) - MAX_TEXT:,} more characters not shown]\n"
        if text not in self._index:
            self._index[text] = len(self.items)
            self.items.append(text)
        return self._index[text]


def _cell(source: str, diagnosis: dict[str, Any] | None) -> list[str]:
    """The candidate's MAP-Elites cell (kfoundry.search.features.cell of features(source, diagnosis))."""
    from kfoundry.search.features import cell, features
    from kfoundry.types import Diagnosis

    try:
        read: Any = Diagnosis.from_dict(diagnosis) if diagnosis else None
    except (TypeError, KeyError, AttributeError):  # a record from another version of the types
        read = _Bound((diagnosis or {}).get("bound"))
    backend, kernels, dot, tile, warps, bound = cell(features(source, read))
    return [str(backend), str(kernels), "yes" if dot else "no", str(tile), str(warps), str(bound)]


class _Bound:
    """What features() reads of a diagnosis (its bound), where the stored one cannot be read back whole."""

    def __init__(self, bound: str | None) -> None:
        self.bound = bound


def _prompt_hash(system: str, user: str) -> str:
    from kfoundry.experts.llm_step import prompt_hash

    return prompt_hash(system, user)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def prompt_files(run_dir: Path) -> list[dict[str, Any]]:
    """The run's prompts/ files, in order: each with the prompt hash the run store keeps with an LLM call
    (of the system and user prompts the file holds; None when its layout does not give them back) and
    the reply filed beside it (replies/ under the same name), when there is one."""
    folder = run_dir / "prompts"
    if not folder.is_dir():
        return []
    replies = run_dir / "replies"
    out = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        text = _read(path)
        if text is None:
            continue
        match = _PROMPT.match(text)
        reply = None
        if replies.is_dir():
            reply = next((r for r in map(_read, sorted(replies.glob(path.stem + ".*"))) if r), None)
        out.append({"file": f"prompts/{path.name}", "text": text, "reply": reply.strip() if reply else None,
                    "system": match["system"] if match else None, "user": match["user"] if match else None,
                    "hash": _prompt_hash(match["system"], match["user"]) if match else None, "used": False})
    return out


def _match_prompt(files: list[dict[str, Any]], prompt_hash: str | None, reply: str | None) -> dict[str, Any] | None:
    """The prompt file of one LLM call: by its prompt hash (the same prompt sent twice: the file whose reply
    is this call's, else the first not taken yet), else by the reply filed beside it."""
    reply = reply.strip() if reply else None
    same = [f for f in files if prompt_hash and f["hash"] == prompt_hash]
    found = next((f for f in same if reply and f["reply"] == reply), None) or \
        next((f for f in same if not f["used"]), None) or (same[0] if same else None) or \
        next((f for f in files if reply and f["reply"] == reply and not f["used"]), None)
    if found is not None:
        found["used"] = True
    return found


def _events(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT id, ts, kind, data FROM events ORDER BY id").fetchall()
    out = []
    for row in rows:
        try:
            data = json.loads(row["data"])
        except ValueError:
            continue
        if isinstance(data, dict):
            out.append({"kind": row["kind"], "ts": row["ts"], **data})
    return out


def _candidate_id(value: Any) -> int | None:
    """A candidate id as events write it: an int (the run store's) or the search's string id."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _reasons(events: list[dict[str, Any]]) -> dict[int, str]:
    """Why the router gave each candidate to its expert (the proposed events)."""
    out = {}
    for event in events:
        if event["kind"] != "proposed":
            continue
        cid = _candidate_id(event.get("candidate_id", event.get("id")))
        if cid is not None and isinstance(event.get("reason"), str) and event["reason"]:
            out[cid] = event["reason"]
    return out


def migrations(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every migrant that moved: (generation, candidate, from island, to island), in order."""
    out = []
    for event in events:
        if event["kind"] != "migrated":
            continue
        for move in event.get("moves") or []:
            if not isinstance(move, (list, tuple)) or len(move) != 3:
                continue
            cid = _candidate_id(move[0])
            if cid is not None:
                out.append({"generation": event.get("generation"), "id": cid, "from": move[1], "to": move[2]})
    return out


def _final_population(conn: sqlite3.Connection) -> dict[int, list[int]]:
    """Island -> the candidates in its population when the search last saved its state."""
    row = conn.execute("SELECT value FROM state WHERE key = 'search'").fetchone()
    try:
        snapshot = json.loads(row["value"]) if row else {}
        islands = (snapshot.get("archipelago") or {}).get("islands") or []
        return {int(island["index"]): [cid for m in island.get("members") or []
                                       if (cid := _candidate_id(m.get("id"))) is not None] for island in islands}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def _diagnosis(data: dict[str, Any] | None) -> dict[str, Any] | None:
    if not data:
        return None
    findings = []
    for f in data.get("findings") or []:
        location = f.get("location") or {}
        findings.append({"severity": f.get("severity"), "category": f.get("category"), "title": f.get("title"),
                         "direction": f.get("direction") or "", "evidence": [str(e) for e in f.get("evidence") or []],
                         "line": location.get("line"), "where": location.get("text") or ""})
    return {"summary": data.get("summary") or "", "focus": data.get("focus"), "bound": data.get("bound"),
            "findings": findings}


def _evaluation(row: sqlite3.Row) -> dict[str, Any]:
    """What the panel shows of a candidate's verdict (its latest finished evaluation)."""
    try:
        record = json.loads(row["evaluation_json"]) if row["evaluation_json"] else {}
    except ValueError:
        record = {}
    correctness, timing = record.get("correctness") or {}, record.get("timing") or {}
    error = record.get("error") or {}
    warnings = [str(w) for w in record.get("warnings") or []]
    warnings += [str(w) for w in (record.get("guard") or {}).get("warnings") or []]
    return {
        "message": row["message"] or "", "phase": record.get("phase"), "runtime_ms": row["runtime_ms"],
        "eager_ms": row["eager_ms"], "compile_ms": row["compile_ms"], "trials": row["trials"],
        "trials_passed": row["trials_passed"], "max_abs_error": row["max_abs_error"],
        "tolerance": correctness.get("tolerance"), "precision": correctness.get("precision"),
        "timing_reason": timing.get("reason"), "error": error.get("text") or error.get("type") or "",
        "warnings": warnings, "attempts": row["attempts"],
    }


def _diff(before: str, after: str, before_name: str, after_name: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=before_name, tofile=after_name, n=3))


def _prompt_parts(prompt: dict[str, Any] | None, strings: _Strings) -> dict[str, int | None] | None:
    """A prompt file as the page keeps it: its system and user prompts apart (an expert's system prompt is
    the same in each of its calls: kept once), or its whole text where its layout is another."""
    if prompt is None:
        return None
    if prompt["system"] is not None:
        return {"system": strings.add(prompt["system"]), "user": strings.add(prompt["user"])}
    return {"text": strings.add(prompt["text"])}


def _calls(conn: sqlite3.Connection, run_dir: Path, strings: _Strings) -> tuple[dict[int, list[dict[str, Any]]], int]:
    """Per candidate, the LLM calls stored with it (the first made it; a later one proposed the same code
    again), each with its prompt (from prompts/) and its reply (from the run store); and how many calls
    made no candidate."""
    files = prompt_files(run_dir)
    rows = conn.execute("SELECT id, candidate_id, expert, created_at, prompt_hash, failure, provider, model, text,"
                        " input_tokens, output_tokens, cost_usd, latency_s, attempts FROM llm_calls"
                        " ORDER BY id").fetchall()
    out: dict[int, list[dict[str, Any]]] = {}
    orphans = 0
    for row in rows:
        if row["candidate_id"] is None:
            orphans += 1
            continue
        prompt = _match_prompt(files, row["prompt_hash"], row["text"])
        out.setdefault(row["candidate_id"], []).append({
            "call": row["id"], "expert": row["expert"], "provider": row["provider"], "model": row["model"],
            "failure": row["failure"], "input_tokens": row["input_tokens"], "output_tokens": row["output_tokens"],
            "cost_usd": row["cost_usd"], "latency_s": row["latency_s"], "attempts": row["attempts"],
            "prompt_hash": row["prompt_hash"], "prompt_file": prompt["file"] if prompt else None,
            "prompt": _prompt_parts(prompt, strings), "reply": strings.add(row["text"]),
        })
    return out, orphans


def explorer_data(run_dir: str | Path, best_id: int | None = None,
                  lineage_ids: list[int] | None = None) -> dict[str, Any]:
    """Everything the explorer shows (plain JSON-able data). `best_id` and `lineage_ids`: the report's
    best candidate and its ancestors, marked on the tree."""
    run_dir = Path(run_dir)
    strings = _Strings()
    with closing(connect(run_dir / DB_NAME, configure=False)) as conn:
        candidates = conn.execute("SELECT id, source, parent_ids, expert, island, generation, origin, created_at"
                                  " FROM candidates ORDER BY id").fetchall()
        latest = {row["candidate_id"]: row for row in conn.execute(
            "SELECT * FROM evaluations WHERE finished_at IS NOT NULL ORDER BY finished_at, id").fetchall()}
        order = {cid: index for index, cid in enumerate(latest, start=1)}  # when each verdict came
        in_flight = {row[0] for row in conn.execute("SELECT candidate_id FROM evaluations WHERE finished_at IS NULL")}
        events = _events(conn)
        calls, orphan_calls = _calls(conn, run_dir, strings)
        population = _final_population(conn)
    sources = {row["id"]: row["source"] for row in candidates}
    reasons = _reasons(events)
    homes: dict[int, list[int]] = {}  # candidate -> the islands whose final population holds it (a migrant: several)
    for island, members in sorted(population.items()):
        for cid in members:
            homes.setdefault(cid, []).append(island)
    nodes = []
    for row in candidates:
        cid = row["id"]
        parents = [int(p) for p in json.loads(row["parent_ids"])]
        evaluation = latest.get(cid)
        try:
            stored = evaluation["diagnosis_json"] if evaluation else None
            diagnosis = json.loads(stored) if stored else None
        except ValueError:
            diagnosis = None
        parent = next((p for p in parents if p in sources), None)
        diff = None
        if parent is not None:
            diff = _diff(sources[parent], row["source"], f"candidate {parent}", f"candidate {cid}")
        status = evaluation["status"] if evaluation else ("in flight" if cid in in_flight else "not evaluated")
        nodes.append({
            "id": cid, "parents": parents, "island": row["island"], "generation": row["generation"],
            "expert": row["expert"], "origin": row["origin"], "created_at": row["created_at"],
            "status": status, "order": order.get(cid),
            "speedup": evaluation["speedup_eager"] if evaluation else None,
            "speedup_compile": evaluation["speedup_compile"] if evaluation else None,
            "evaluation": _evaluation(evaluation) if evaluation else None,
            "diagnosis": _diagnosis(diagnosis), "cell": _cell(row["source"], diagnosis),
            "code": strings.add(row["source"]), "diff_parent": parent,
            "diff": strings.add(diff) if diff else None, "same_as_parent": parent is not None and not diff,
            "calls": calls.get(cid, []), "reason": reasons.get(cid, ""),
            "populations": homes.get(cid, []), "best": cid == best_id, "lineage": cid in set(lineage_ids or []),
        })
    present = {row["id"] for row in candidates}
    moves = [m for m in migrations(events) if m["id"] in present]
    islands = sorted({n["island"] for n in nodes} | {m["to"] for m in moves if isinstance(m["to"], int)}
                     | set(population))
    return {
        "nodes": nodes, "islands": islands, "migrations": moves, "best": best_id,
        "features": [{"key": key, "label": label, "order": FEATURE_ORDER[key]} for key, label in FEATURES],
        "orphan_calls": orphan_calls, "has_population": bool(population), "strings": strings.items,
    }


def explorer_json(data: dict[str, Any]) -> str:
    """The data as JSON safe inside <script type="application/json">: no '<', '>' or '&' left that could
    end the element or start a comment (JSON.parse reads the escapes back)."""
    text = json.dumps(finite(data), separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
