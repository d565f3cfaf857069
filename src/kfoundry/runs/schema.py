"""The run store's SQLite schema and connection settings."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from kfoundry import sqlite_files

SCHEMA_VERSION = 1
DB_NAME = "run.sqlite"
ORIGINS = ("seed", "llm", "template", "tuner", "migrant")

DDL = f"""
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL              -- JSON
);
CREATE TABLE candidates (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL,            -- exactly as evaluated
    source_hash TEXT NOT NULL,       -- sha256 of the normalized source
    parent_ids TEXT NOT NULL,        -- JSON list of candidate ids
    expert TEXT NOT NULL,
    island INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    origin TEXT NOT NULL CHECK (origin IN ({", ".join(repr(o) for o in ORIGINS)})),
    created_at REAL NOT NULL
);
CREATE INDEX candidates_hash ON candidates (source_hash);
CREATE INDEX candidates_generation ON candidates (generation);
CREATE TABLE evaluations (
    id INTEGER PRIMARY KEY,
    candidate_id INTEGER NOT NULL REFERENCES candidates (id),
    started_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 1,   -- times started (a resume restarts the same row)
    finished_at REAL,                      -- NULL: in flight
    status TEXT,
    message TEXT,
    runtime_ms REAL,
    eager_ms REAL,
    compile_ms REAL,
    speedup_eager REAL,
    speedup_compile REAL,
    trials INTEGER,
    trials_passed INTEGER,
    max_abs_error REAL,
    max_rel_error REAL,
    evaluation_json TEXT,                  -- Evaluation.to_dict()
    diagnosis_json TEXT                    -- Diagnosis.to_dict()
);
CREATE INDEX evaluations_candidate ON evaluations (candidate_id);
CREATE INDEX evaluations_in_flight ON evaluations (finished_at) WHERE finished_at IS NULL;
CREATE TABLE llm_calls (
    id INTEGER PRIMARY KEY,
    candidate_id INTEGER REFERENCES candidates (id),
    expert TEXT NOT NULL,
    created_at REAL NOT NULL,
    prompt_hash TEXT,
    failure TEXT,                          -- NULL: the call returned a reply
    provider TEXT, model TEXT, text TEXT,
    input_tokens INTEGER, output_tokens INTEGER,
    cost_usd REAL,                         -- NULL: unknown, never a guessed 0
    latency_s REAL, attempts INTEGER, request_hash TEXT
);
CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL                     -- JSON object
);
CREATE INDEX events_kind ON events (kind);
CREATE TABLE state (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,                   -- JSON
    updated_at REAL NOT NULL
);
PRAGMA user_version = {SCHEMA_VERSION};
"""


WAY_OUT = ("the run's records cannot be read: start a new run in another directory (-o), or move this "
           "one aside")


def connect(path: Path, configure: bool = True) -> sqlite3.Connection:
    """`configure=False` opens without touching the file, to check first what it is."""
    # Autocommit mode: every write method opens its own transaction (see RunStore._write).
    # damage met at open or at any later query: a DamagedFile (one line, exit code 2), never a traceback
    conn = sqlite_files.connect(path, WAY_OUT, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.row_factory = sqlite3.Row
    if configure:
        configure_connection(conn)
    return conn


def configure_connection(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA journal_mode = WAL")
    # FULL: each commit is fsynced to the WAL, so a kill -9 (or power loss) keeps it.
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")
