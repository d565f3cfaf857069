"""The library's SQLite schema. One id space for every item (kernel, insight, step); steps keep their
search facts in a table of their own.

Versions: 1 the items and steps; 2 adds the embeddings cache (semantic retrieval)."""

SCHEMA_VERSION = 2

EMBEDDINGS = """
CREATE TABLE IF NOT EXISTS embeddings (
    item_id INTEGER NOT NULL REFERENCES items (id) ON DELETE CASCADE,
    model TEXT NOT NULL,                 -- the embedding model's name
    digest TEXT NOT NULL,                -- of the embedded document: an item edited in place is embedded anew
    vector BLOB NOT NULL,                -- float32, little-endian, unit length
    PRIMARY KEY (item_id, model)
);
"""

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    uid TEXT NOT NULL UNIQUE,            -- stable across export/import: seed:<slug>, rule:<key>, or a hash
    type TEXT NOT NULL CHECK (type IN ('kernel', 'insight', 'step')),
    created REAL NOT NULL,
    title TEXT NOT NULL,
    kind TEXT,                           -- the problem kind of the signature
    signature TEXT NOT NULL,             -- JSON
    text TEXT NOT NULL DEFAULT '',       -- kernel notes, insight text, step summary
    code TEXT,                           -- kernel source, step diff
    origin TEXT NOT NULL,                -- seed, run, rule, llm
    device TEXT,
    speedup REAL,
    data TEXT NOT NULL DEFAULT '{}'      -- JSON: insight evidence ids, ...
);
CREATE INDEX IF NOT EXISTS items_type_kind ON items (type, kind);
CREATE TABLE IF NOT EXISTS steps (
    item_id INTEGER PRIMARY KEY REFERENCES items (id) ON DELETE CASCADE,
    run_id TEXT,
    expert TEXT NOT NULL,
    outcome TEXT NOT NULL,
    diagnosis TEXT NOT NULL,             -- JSON list of diagnosis categories
    speedup_before REAL,
    speedup_after REAL,
    parent_source TEXT,
    child_source TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS steps_expert ON steps (expert);
""" + EMBEDDINGS

# what turns a library of version v - 1 into version v
MIGRATIONS = {2: EMBEDDINGS}
