"""The run store: one SQLite file per run directory, written as the run goes, read on resume."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from kfoundry.errors import ProblemError, UsageError
from kfoundry.llm.reply import LLMReply
from kfoundry.redact import Redactor
from kfoundry.runs import queries
from kfoundry.runs.errors import RunStoreError
from kfoundry.source_identity import source_hash as hash_source
from kfoundry.runs.schema import (
    DB_NAME,
    DDL,
    ORIGINS,
    SCHEMA_VERSION,
    WAY_OUT,
    configure_connection,
    connect,
)
from kfoundry.sqlite_files import DamagedFile
from kfoundry.types import STATUSES

_REPLY_FIELDS = tuple(f.name for f in dataclasses.fields(LLMReply))
CHOSEN_BEST = "best"  # the state key of the search's own best (RunStore.choose_best)
_redact = Redactor()


def finite(value: Any) -> Any:
    """JSON has no NaN or infinity: store them as null (unknown)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _json(value: Any) -> str:
    return json.dumps(finite(value), sort_keys=True, allow_nan=False)


class RunStore:
    def __init__(self, run_dir: Path, conn: sqlite3.Connection) -> None:
        self.run_dir = run_dir
        self.path = run_dir / DB_NAME
        self._conn = conn
        self._lock = threading.Lock()

    # ---- opening ---------------------------------------------------------------------------

    @classmethod
    def create(cls, run_dir: str | Path, problem_path: str | Path, settings: dict[str, Any],
               seed: int) -> RunStore:
        run_dir = Path(run_dir)
        if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
            raise UsageError(f"run directory {run_dir} already exists and is not empty: "
                             "use --resume to continue that run, or choose another directory")
        problem_path = Path(problem_path)
        try:
            problem_source = problem_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ProblemError(f"cannot read problem file {problem_path}: {exc}") from exc
        run_dir.mkdir(parents=True, exist_ok=True)
        conn = connect(run_dir / DB_NAME)
        meta = {
            "schema_version": SCHEMA_VERSION,
            "created_at": time.time(),
            "problem_path": str(problem_path.resolve()),
            "problem_name": problem_path.name,
            "problem_sha256": hashlib.sha256(problem_source.encode("utf-8")).hexdigest(),
            "problem_source": problem_source,
            "settings": settings,
            "seed": seed,
        }
        # Schema and meta in one transaction: a crash here leaves no half-made store.
        conn.executescript("BEGIN IMMEDIATE;\n" + DDL)
        conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                         [(k, _json(v)) for k, v in meta.items()])
        conn.execute("COMMIT")
        (run_dir / "problem.py").write_text(problem_source, encoding="utf-8")
        store = cls(run_dir, conn)
        store.event("session_start", resumed=False)
        return store

    @classmethod
    def open(cls, run_dir: str | Path, *, resume: bool = True) -> RunStore:
        """Open an existing run. `resume=False` reads it without starting a new session."""
        run_dir = Path(run_dir)
        path = run_dir / DB_NAME
        if not path.is_file():
            if resume:
                raise RunStoreError(f"no run store at {path}: nothing to resume "
                                    "(start a new run without --resume)")
            raise RunStoreError(f"no run store at {path}: {run_dir} is not a run folder "
                                "(kfoundry optimize writes one, with -o DIR)")
        conn = connect(path, configure=False)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            has_meta = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
                                    ).fetchone()
            row = has_meta and conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise RunStoreError(f"{path} is not a readable run store ({exc}); "
                                "it may be corrupt: start a new run in another directory") from exc
        if not row or json.loads(row[0]) != version:
            conn.close()
            raise RunStoreError(f"{path} is not a kfoundry run store (no schema version)")
        if version != SCHEMA_VERSION:
            conn.close()
            raise RunStoreError(f"{path} has run-store schema version {version}; this kfoundry "
                                f"reads version {SCHEMA_VERSION}: resume it with the kfoundry "
                                "that made it, or start a new run")
        if resume:  # a run's store is small: find damage now, not halfway through the resumed search
            problems = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
            if problems != ["ok"]:
                conn.close()
                raise DamagedFile(path, sqlite3.DatabaseError(problems[0]), WAY_OUT)
        configure_connection(conn)
        store = cls(run_dir, conn)
        if resume:
            store.event("session_start", resumed=True)
        return store

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    # ---- meta -----------------------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        return {row["key"]: json.loads(row["value"]) for row in self._read("SELECT * FROM meta")}

    @property
    def seed(self) -> int:
        return self.meta()["seed"]

    @property
    def settings(self) -> dict[str, Any]:
        return self.meta()["settings"]

    def problem_source(self) -> str:
        return self.meta()["problem_source"]

    # ---- candidates -----------------------------------------------------------------------

    def add_candidate(self, source: str, parent_ids: list[int], expert: str, island: int,
                      generation: int, origin: str, source_hash: str | None = None) -> int:
        """Store a candidate; `source_hash` defaults to the hash of its normalized source."""
        if origin not in ORIGINS:
            raise ValueError(f"origin must be one of {ORIGINS}, not {origin!r}")
        with self._write() as conn:
            cursor = conn.execute(
                "INSERT INTO candidates (source, source_hash, parent_ids, expert, island, generation,"
                " origin, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (source, source_hash or hash_source(source), _json([int(p) for p in parent_ids]),
                 expert, island, generation, origin, time.time()))
            return int(cursor.lastrowid)

    def find_by_hash(self, source_hash: str) -> int | None:
        """The first candidate with this normalized-source hash, or None."""
        rows = self._read("SELECT id FROM candidates WHERE source_hash = ? ORDER BY id LIMIT 1",
                          (source_hash,))
        return rows[0]["id"] if rows else None

    def candidate(self, candidate_id: int) -> dict[str, Any]:
        rows = self._read("SELECT * FROM candidates WHERE id = ?", (candidate_id,))
        if not rows:
            raise KeyError(f"no candidate {candidate_id} in {self.path}")
        return queries.candidate_dict(rows[0])

    def candidates(self) -> list[dict[str, Any]]:
        """Every candidate, in the order stored."""
        return [queries.candidate_dict(row) for row in self._read("SELECT * FROM candidates ORDER BY id")]

    # ---- evaluations ----------------------------------------------------------------------

    def finished_evaluations(self) -> dict[int, dict[str, Any]]:
        """candidate id -> its finished evaluation (evaluation and diagnosis as dicts)."""
        rows = self._read("SELECT * FROM evaluations WHERE finished_at IS NOT NULL ORDER BY id")
        return {row["candidate_id"]: queries.evaluation_dict(row) for row in rows}

    def start_evaluation(self, candidate_id: int) -> int:
        """Record an evaluation as in flight. A candidate has at most one in-flight evaluation:
        starting it again (a resume re-queueing it) returns the same id, so nothing is doubled."""
        with self._write() as conn:
            row = conn.execute("SELECT id FROM evaluations WHERE candidate_id = ? AND finished_at IS NULL",
                               (candidate_id,)).fetchone()
            if row is not None:
                conn.execute("UPDATE evaluations SET attempts = attempts + 1, started_at = ? WHERE id = ?",
                             (time.time(), row["id"]))
                return int(row["id"])
            cursor = conn.execute("INSERT INTO evaluations (candidate_id, started_at) VALUES (?, ?)",
                                  (candidate_id, time.time()))
            return int(cursor.lastrowid)

    def finish_evaluation(self, eval_id: int, evaluation: dict[str, Any] | Any,
                          diagnosis: dict[str, Any] | Any | None = None) -> None:
        """Store an Evaluation (its to_dict(), or the object). The diagnosis defaults to its own."""
        data = evaluation.to_dict() if hasattr(evaluation, "to_dict") else dict(evaluation)
        if data.get("status") not in STATUSES:
            raise ValueError(f"evaluation status must be one of {STATUSES}, not {data.get('status')!r}")
        if diagnosis is not None and hasattr(diagnosis, "to_dict"):
            diagnosis = diagnosis.to_dict()
        diagnosis = diagnosis if diagnosis is not None else data.get("diagnosis")
        data = finite(data)
        timing, correctness = data.get("timing") or {}, data.get("correctness") or {}
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE evaluations SET finished_at = ?, status = ?, message = ?, runtime_ms = ?,"
                " eager_ms = ?, compile_ms = ?, speedup_eager = ?, speedup_compile = ?, trials = ?,"
                " trials_passed = ?, max_abs_error = ?, max_rel_error = ?, evaluation_json = ?,"
                " diagnosis_json = ? WHERE id = ? AND finished_at IS NULL",
                (time.time(), data["status"], data.get("message", ""), timing.get("runtime_ms"),
                 timing.get("eager_ms"), timing.get("compile_ms"), timing.get("speedup_eager"),
                 timing.get("speedup_compile"), correctness.get("trials"),
                 correctness.get("trials_passed"), correctness.get("max_abs_error"),
                 correctness.get("max_rel_error"), _json(data),
                 None if diagnosis is None else _json(diagnosis), eval_id))
            if cursor.rowcount != 1:
                exists = conn.execute("SELECT 1 FROM evaluations WHERE id = ?", (eval_id,)).fetchone()
                raise ValueError(f"evaluation {eval_id} is already finished" if exists
                                 else f"no evaluation {eval_id}")

    def amend_timing(self, eval_id: int, evaluation: dict[str, Any] | Any) -> None:
        """A finished evaluation's timing completed after its verdict (baselines measured later)."""
        data = finite(evaluation.to_dict() if hasattr(evaluation, "to_dict") else dict(evaluation))
        timing = data.get("timing") or {}
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE evaluations SET eager_ms = ?, compile_ms = ?, speedup_eager = ?, speedup_compile = ?,"
                " evaluation_json = ? WHERE id = ? AND finished_at IS NOT NULL",
                (timing.get("eager_ms"), timing.get("compile_ms"), timing.get("speedup_eager"),
                 timing.get("speedup_compile"), _json(data), eval_id))
            if cursor.rowcount != 1:
                raise ValueError(f"no finished evaluation {eval_id}")

    def in_flight(self) -> list[dict[str, Any]]:
        """Evaluations started and not finished (a crash's leftovers, on resume): to re-run and
        finish under the same id."""
        rows = self._read("SELECT id, candidate_id, started_at, attempts FROM evaluations"
                          " WHERE finished_at IS NULL ORDER BY id")
        return [dict(row) for row in rows]

    def unevaluated(self) -> list[int]:
        """Candidates stored but never started (a crash between storing and queueing one)."""
        rows = self._read("SELECT id FROM candidates c WHERE NOT EXISTS"
                          " (SELECT 1 FROM evaluations e WHERE e.candidate_id = c.id) ORDER BY id")
        return [row["id"] for row in rows]

    def evaluation(self, eval_id: int) -> dict[str, Any]:
        rows = self._read("SELECT * FROM evaluations WHERE id = ?", (eval_id,))
        if not rows:
            raise KeyError(f"no evaluation {eval_id} in {self.path}")
        return queries.evaluation_dict(rows[0])

    # ---- LLM calls, events, state ---------------------------------------------------------

    def add_llm_call(self, candidate_id: int | None, expert: str, reply: dict[str, Any] | None,
                     prompt_hash: str | None, failure: str | None = None) -> int:
        """Store one LLM call: only LLMReply's own fields (no provider secrets), redacted again."""
        reply = reply or {}
        fields = {name: reply.get(name) for name in _REPLY_FIELDS}
        for name in ("text", "provider"):
            if isinstance(fields[name], str):
                fields[name] = _redact(fields[name])
        columns = ", ".join(_REPLY_FIELDS)
        marks = ", ".join("?" for _ in _REPLY_FIELDS)
        with self._write() as conn:
            cursor = conn.execute(
                f"INSERT INTO llm_calls (candidate_id, expert, created_at, prompt_hash, failure, {columns})"
                f" VALUES (?, ?, ?, ?, ?, {marks})",
                (candidate_id, expert, time.time(), prompt_hash,
                 None if failure is None else _redact(failure), *fields.values()))
            return int(cursor.lastrowid)

    def event(self, kind: str, **data: Any) -> None:
        with self._write() as conn:
            conn.execute("INSERT INTO events (ts, kind, data) VALUES (?, ?, ?)",
                         (time.time(), kind, _json(data)))

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        sql, params = "SELECT * FROM events", ()
        if kind is not None:
            sql, params = sql + " WHERE kind = ?", (kind,)
        rows = self._read(sql + " ORDER BY id", params)
        return [{"id": r["id"], "ts": r["ts"], "kind": r["kind"], **json.loads(r["data"])} for r in rows]

    def save_state(self, key: str, value: Any) -> None:
        with self._write() as conn:
            conn.execute("INSERT INTO state (key, value, updated_at) VALUES (?, ?, ?)"
                         " ON CONFLICT (key) DO UPDATE SET value = excluded.value,"
                         " updated_at = excluded.updated_at", (key, _json(value), time.time()))

    def load_state(self, key: str, default: Any = None) -> Any:
        rows = self._read("SELECT value FROM state WHERE key = ?", (key,))
        return json.loads(rows[0]["value"]) if rows else default

    # ---- queries and outputs --------------------------------------------------------------

    def best(self, metric: str = "speedup_eager") -> dict[str, Any] | None:
        with self._lock:
            return queries.best(self._conn, metric)

    def choose_best(self, candidate_id: int | None) -> None:
        """The search's own best (its fitness decides ties the speedups cannot: on CPU every correct candidate
        is 1.0x, and the search keeps the one it recorded first), which the run's outputs then report."""
        self.save_state(CHOSEN_BEST, {"candidate_id": candidate_id})

    def final_best(self) -> dict[str, Any] | None:
        """The run's best: the search's choice where one is stored and verified, else the best by speedup."""
        chosen = (self.load_state(CHOSEN_BEST) or {}).get("candidate_id")
        with self._lock:
            found = queries.best(self._conn, "speedup_eager", chosen) if chosen is not None else None
            return found or queries.best(self._conn, "speedup_eager")

    def lineage(self, candidate_id: int) -> list[dict[str, Any]]:
        with self._lock:
            return queries.lineage(self._conn, candidate_id)

    def history(self) -> list[dict[str, Any]]:
        with self._lock:
            return queries.history(self._conn)

    def verified_in_order(self) -> list[dict[str, Any]]:
        with self._lock:
            return queries.verified_in_order(self._conn)

    def totals(self) -> dict[str, Any]:
        with self._lock:
            return queries.totals(self._conn)
