"""The experience library: one SQLite file (WAL) of kernels, insights and recorded optimization steps,
seeded on first open with curated kernels, and searched by signature similarity plus BM25, plus the
similarity of sentence embeddings when the optional embedding model is installed."""

from __future__ import annotations

import builtins
import difflib
import hashlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import numpy as np

from kfoundry.errors import brief
from kfoundry.library import embeddings
from kfoundry.library import seed as seed_data
from kfoundry.library.errors import LibraryError
from kfoundry.library.distil import measured, rule_insights
from kfoundry.library.schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION
from kfoundry.library.similarity import op_set, same_class, similarity
from kfoundry.library.text_index import bm25_scores
from kfoundry.problem_signature import problem_class as class_of
from kfoundry.problem_signature import short_name
from kfoundry.problem_signature import tokens as word_tokens
from kfoundry.sqlite_files import connect

ITEM_TYPES = ("kernel", "insight", "step")
SIGNATURE_WEIGHT = 0.6  # the rest is BM25
# Semantic retrieval adds the cosine similarity of the embeddings of the query and of each item's document. Like
# BM25's, it is scaled so the best item scores 1 (and floored at 0): both say how well an item's text matches
# compared with the others'. The signature keeps the larger share; the two text scores split the rest.
SEMANTIC_WEIGHTS = {"signature": 0.5, "bm25": 0.25, "embedding": 0.25}
EMBED_CODE_CHARS = 1000  # of an item's code (comments stripped) its document holds; the model reads ~256 tokens
# An item whose signature is less like the problem's than this is not retrieved, whatever its text score.
# Shapes alone give up to 0.20 (similarity.WEIGHTS["shape"]), so passing takes ops or a kind in common too.
# On the seed: a cumsum scores 0.01 against the conv kernel, 0.12 against the GEMM one, 0.15 at most (the row
# reduction); across classes the highest is 0.20 (a Linear+GELU against the pointwise chain, through gelu);
# within a class the lowest is 0.25 (a plain 64x64 matmul against the GEMM-epilogue kernel), the rest 0.37..0.92.
SIMILARITY_FLOOR = 0.22
# An item of another class must be closer still: a masked cumsum shares only a `mul` with the GEMM-epilogue kernel
# and scores 0.23 against it, which teaches a scan nothing; the pointwise chain scores 0.30 against a Linear+GELU.
OTHER_CLASS_FLOOR = 0.35
STEP_FIELDS = ("run_id", "expert", "outcome", "diagnosis", "speedup_before", "speedup_after",
               "parent_source", "child_source")


WAY_OUT = "move it aside (a new one is made at the next run) or give another with --library"


def semantic_by_default() -> bool:
    """Whether retrieve(semantic=None) uses embeddings: $KFOUNDRY_SEMANTIC_RETRIEVAL (0 or 1) when set, else
    whether the embedding model is installed."""
    value = os.environ.get("KFOUNDRY_SEMANTIC_RETRIEVAL", "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    return embeddings.available()


class Retrieval(list):
    """retrieve()'s items, best first, and what a prompt says when none was close enough: the floor and the
    highest similarity any item had (retrieved or not), and whether the problem had a signature to compare."""

    def __init__(self, items=(), *, floor: float = SIMILARITY_FLOOR, best_similarity: float | None = None,
                 best_title: str | None = None, by_signature: bool = True):
        super().__init__(items)
        self.floor, self.best_similarity, self.best_title = floor, best_similarity, best_title
        self.by_signature = by_signature


_ORIGIN_NOTE = {"seed": "seed note", "rule": "rule distilled from earlier runs", "llm": "LLM's note from earlier runs",
                "run": "note from an earlier run"}


def _mentions(text: str, problem: dict[str, Any], cls: str) -> str | None:
    """The word by which `text` names the problem's class or one of its ops, if it does."""
    ops = [short_name(op) for op in op_set(problem)]
    for word in word_tokens(text):
        if word in ops or (cls != "other" and word.startswith(cls)):
            return word
    return None


def relevance(problem: dict[str, Any], item_sig: dict[str, Any], sig_score: float, text_score: float,
              text: str, origin: str) -> tuple[bool, bool, str]:
    """(retrieved, of the problem's class, why) for one item. Items with ops in their signature pass on
    similarity (SIMILARITY_FLOOR). Those without (seed insights carry a kind alone) cannot be compared by ops
    or shapes: one with a kind passes when it is of the problem's class, one with no signature at all when its
    text names the problem's class or one of its ops. A problem without a signature is matched on text alone."""
    if not (problem.get("kind") or op_set(problem)):
        return text_score > 0, False, "text match only (the problem has no signature)"
    cls = class_of(item_sig) if item_sig else "other"
    item_ops = op_set(item_sig) if item_sig else set()
    if item_ops:
        same = same_class(problem, item_sig)
        common = [short_name(op) for op in op_set(problem) if op in item_ops]
        label = f"same class ({cls})" if same else f"class {cls}, not {class_of(problem)}"
        ops = f"ops in common: {', '.join(sorted(common))}" if common else "no ops in common"
        floor = SIMILARITY_FLOOR if same else OTHER_CLASS_FLOOR
        return sig_score >= floor, same, f"{label}; {ops}; similarity {sig_score:.2f}"
    if item_sig.get("kind"):
        same = same_class(problem, item_sig)
        return same, same, f"{_ORIGIN_NOTE.get(origin, 'note')} on {cls} problems"
    word = _mentions(text, problem, class_of(problem))
    return word is not None, word is not None, f"general note that mentions {word}"


def default_path() -> Path:
    from kfoundry.paths import cache_dir

    return cache_dir() / "library.sqlite"


def unified_diff(parent: str | None, child: str) -> str:
    return "".join(difflib.unified_diff((parent or "").splitlines(keepends=True), child.splitlines(keepends=True),
                                        fromfile="parent.py", tofile="child.py"))


def _content_uid(*parts: Any) -> str:
    payload = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


class Library:
    def __init__(self, path: str | Path | None = None, seed: bool = True):
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._embedder: embeddings.Embedder | None = None
        # damage met at open or at any later query: a DamagedFile (one line, exit code 2), never a traceback
        try:
            self.db = connect(self.path, WAY_OUT, timeout=30)
            try:
                self.db.row_factory = sqlite3.Row
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA foreign_keys=ON")
                self._migrate()
                if seed:
                    self._load_seed()
            except BaseException:
                self.db.close()
                raise
        except sqlite3.Error as exc:  # not damage (that is a DamagedFile): a folder, a path SQLite cannot open
            raise LibraryError(f"cannot open library {self.path}: {brief(exc)}") from None

    # --- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Library":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row["value"] if row else None

    def _set_meta(self, key: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, str(value)))

    @property
    def schema_version(self) -> int:
        return int(self._meta("schema_version") or 0)

    def _migrate(self) -> None:
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" in tables:
            found = int(self._meta("schema_version") or 0)
            if found > SCHEMA_VERSION:
                raise LibraryError(f"library {self.path} has schema version {found}, newer than this "
                                   f"kfoundry understands ({SCHEMA_VERSION}): upgrade kfoundry")
        elif tables:
            raise LibraryError(f"{self.path} is an SQLite file but not a kfoundry library")
        else:
            found = SCHEMA_VERSION
        with self.db:
            for version in range(found + 1, SCHEMA_VERSION + 1):
                self.db.executescript(MIGRATIONS.get(version, ""))
            self.db.executescript(SCHEMA)
            self._set_meta("schema_version", SCHEMA_VERSION)

    def _load_seed(self) -> None:
        """Insert the shipped seed once per seed version; existing items (by uid) are left alone."""
        if int(self._meta("seed_version") or 0) >= seed_data.SEED_VERSION:
            return
        with self.db:
            for k in seed_data.seed_kernels():
                self._insert("kernel", uid=f"seed:{k['slug']}", title=k["title"], signature=k["signature"],
                             text=k["notes"], code=k["source"], origin="seed")
            for i in seed_data.seed_insights():
                self._insert("insight", uid=f"seed:{i['slug']}", title=i["text"].split(": ")[0].split(". ")[0][:80],
                             signature=i["signature"], text=i["text"], origin="seed", data={"evidence": []})
            self._set_meta("seed_version", seed_data.SEED_VERSION)

    # --- writing ---------------------------------------------------------------------------------
    def _insert(self, type_: str, *, uid: str, title: str, signature: dict, text: str = "", code: str | None = None,
                origin: str, device: str | None = None, speedup: float | None = None, data: dict | None = None,
                created: float | None = None) -> int | None:
        """The new item's id, or None when an item with this uid is already there."""
        cursor = self.db.execute(
            "INSERT OR IGNORE INTO items (uid, type, created, title, kind, signature, text, code, origin, device,"
            " speedup, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (uid, type_, created or time.time(), title, (signature or {}).get("kind"), json.dumps(signature or {}),
             text, code, origin, device, speedup, json.dumps(data or {})))
        return cursor.lastrowid if cursor.rowcount else None

    def record_step(self, problem_signature: dict, expert: str, parent_source: str | None, child_source: str,
                    diagnosis_categories: builtins.list[str], outcome: str, speedup_before: float | None,
                    speedup_after: float | None, device: str | None = None, run_id: str | None = None,
                    data: dict | None = None) -> int:
        """Record one expert step (parent -> child) and how it went; returns the step's id. `data`
        holds what the expert knows of its change (the tuner: the settings it changed)."""
        kind = problem_signature.get("kind") or "other"
        categories = builtins.list(diagnosis_categories or [])
        speed = f"{_fmt(speedup_before)} -> {_fmt(speedup_after)}" if speedup_after is not None else \
            "speed not measured" if outcome == "ok" else "no speed"
        strategy = f" with the strategy {data['strategy']!r}" if (data or {}).get("strategy") else ""
        title = f"{expert}{strategy} on {kind} ({', '.join(categories) or 'no diagnosis'}): {outcome}, {speed}"
        text = f"{title}. problem {problem_signature.get('problem', '')} {problem_signature.get('text', '')}"
        now = time.time()
        with self.db:
            item_id = self._insert(
                "step", uid=_content_uid("step", run_id, expert, child_source, parent_source, now), title=title,
                signature=problem_signature, text=text, code=unified_diff(parent_source, child_source),
                origin="run", device=device, speedup=speedup_after, created=now, data=data)
            self.db.execute(
                "INSERT INTO steps (item_id, run_id, expert, outcome, diagnosis, speedup_before, speedup_after,"
                " parent_source, child_source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (item_id, run_id, expert, outcome, json.dumps(categories), speedup_before, speedup_after,
                 parent_source, child_source))
        return item_id

    def add_kernel(self, title: str, signature: dict, source: str, notes: str = "", speedup: float | None = None,
                   device: str | None = None, origin: str = "run") -> int:
        if origin not in ("seed", "run"):
            raise LibraryError(f"kernel origin must be 'seed' or 'run', not {origin!r}")
        with self.db:
            item_id = self._insert("kernel", uid=_content_uid("kernel", title, source, device), title=title,
                                   signature=signature, text=notes, code=source, origin=origin, device=device,
                                   speedup=speedup)
        return item_id if item_id is not None else self._id_of_uid(_content_uid("kernel", title, source, device))

    def add_insight(self, text: str, signature: dict | None = None, evidence_ids: builtins.list[int] | None = None,
                    origin: str = "llm", key: str | None = None) -> int:
        """Add an insight; one with the same `key` (rule insights) is updated in place."""
        if origin not in ("rule", "llm", "seed"):
            raise LibraryError(f"insight origin must be 'rule' or 'llm', not {origin!r}")
        uid = f"{origin}:{key}" if key else _content_uid("insight", text)
        data = {"evidence": builtins.list(evidence_ids or [])}
        title = text if len(text) <= 80 else text[:77] + "..."
        with self.db:
            item_id = self._insert("insight", uid=uid, title=title, signature=signature or {}, text=text,
                                   origin=origin, data=data)
            if item_id is None:
                self.db.execute("UPDATE items SET title = ?, text = ?, signature = ?, kind = ?, data = ?, created = ?"
                                " WHERE uid = ?", (title, text, json.dumps(signature or {}),
                                                   (signature or {}).get("kind"), json.dumps(data), time.time(), uid))
        return item_id if item_id is not None else self._id_of_uid(uid)

    def _id_of_uid(self, uid: str) -> int:
        return self.db.execute("SELECT id FROM items WHERE uid = ?", (uid,)).fetchone()["id"]

    def distil(self, min_support: int = 2) -> builtins.list[dict]:
        """Derive rule insights from all recorded steps (re-running updates them); returns them. They are the
        steps' current reading: a rule insight this reading no longer makes (its group lost its measured steps,
        or an older version made it from unmeasured ones) is removed."""
        insights = rule_insights(self.steps(), min_support)
        out = []
        for insight in insights:
            item_id = self.add_insight(insight["text"], insight["signature"], insight["evidence"], "rule",
                                       key=insight["key"])
            out.append(self.get(item_id))
        stale = self._stale_rule_insights({insight["key"] for insight in insights})
        if stale:
            with self.db:
                self.db.executemany("DELETE FROM items WHERE id = ?", [(item_id,) for item_id in stale])
        return out

    def _stale_rule_insights(self, keys: set[str]) -> dict[int, str]:
        """{id: title} of the rule insights whose key is not among `keys`."""
        rows = self.db.execute("SELECT id, uid, title FROM items WHERE type = 'insight' AND origin = 'rule'")
        return {r["id"]: r["title"] for r in rows if r["uid"].removeprefix("rule:") not in keys}

    def _unmeasured_ids(self) -> set[int]:
        """The unmeasured steps (distil.measured) and the insights whose evidence is only such steps."""
        rows = self.db.execute("SELECT steps.item_id, steps.outcome, steps.speedup_after, items.device FROM steps"
                               " JOIN items ON items.id = steps.item_id")
        unmeasured = {r["item_id"] for r in rows if not measured(dict(r))}
        for row in self.db.execute("SELECT id, data FROM items WHERE type = 'insight' AND origin IN ('rule', 'llm')"):
            evidence = json.loads(row["data"] or "{}").get("evidence") or []
            if evidence and all(step_id in unmeasured for step_id in evidence):
                unmeasured.add(row["id"])
        return unmeasured

    def prune_unmeasured(self, dry_run: bool = False) -> dict[str, builtins.list[dict]]:
        """Remove the unmeasured steps, the insights built only from them, and the rule insights that the
        remaining steps no longer support; re-distil the rest. Returns {"steps", "insights"}: [{id, title}] of
        what was (with dry_run: would be) removed."""
        doomed = self._unmeasured_ids()
        titles = {r["id"]: (r["type"], r["title"]) for r in self.db.execute("SELECT id, type, title FROM items")
                  if r["id"] in doomed}
        remaining = [step for step in self.steps() if step["id"] not in doomed]
        keys = {insight["key"] for insight in rule_insights(remaining)}
        for item_id, title in self._stale_rule_insights(keys).items():
            titles[item_id] = ("insight", title)
        removed = {"steps": [], "insights": []}
        for item_id, (type_, title) in sorted(titles.items()):
            removed["steps" if type_ == "step" else "insights"].append({"id": item_id, "title": title})
        if dry_run or not titles:
            return removed
        with self.db:
            self.db.executemany("DELETE FROM items WHERE id = ?", [(item_id,) for item_id in titles])
            for row in self.db.execute("SELECT id, data FROM items WHERE type = 'insight'").fetchall():
                data = json.loads(row["data"] or "{}")
                kept = [i for i in data.get("evidence") or [] if i not in titles]
                if kept != (data.get("evidence") or []):
                    self.db.execute("UPDATE items SET data = ? WHERE id = ?",
                                    (json.dumps({**data, "evidence": kept}), row["id"]))
        self.distil()
        return removed

    # --- reading ---------------------------------------------------------------------------------
    def _row_to_item(self, row: sqlite3.Row, full: bool = True) -> dict:
        item = {k: row[k] for k in ("id", "uid", "type", "created", "title", "kind", "text", "origin", "device",
                                    "speedup")}
        item["signature"] = json.loads(row["signature"])
        item.update(json.loads(row["data"]))
        if full:
            item["code"] = row["code"]
        return item

    def get(self, item_id: int) -> dict:
        row = self.db.execute("SELECT * FROM items WHERE id = ?", (int(item_id),)).fetchone()
        if row is None:
            raise LibraryError(f"no library item with id {item_id} in {self.path}")
        item = self._row_to_item(row)
        if item["type"] == "step":
            step = self.db.execute("SELECT * FROM steps WHERE item_id = ?", (item["id"],)).fetchone()
            item.update({k: step[k] for k in STEP_FIELDS})
            item["diagnosis"] = json.loads(step["diagnosis"])
            item["diff"] = item["code"]
        return item

    def list(self, kind: str | None = None, type: str | None = None) -> builtins.list[dict]:
        """Items (without code), newest first, optionally of one problem kind and/or item type."""
        sql, args = "SELECT * FROM items WHERE 1=1", []
        if kind:
            sql, args = sql + " AND kind = ?", args + [kind]
        if type:
            sql, args = sql + " AND type = ?", args + [type]
        rows = self.db.execute(sql + " ORDER BY id DESC", args).fetchall()
        return [self._row_to_item(r, full=False) for r in rows]

    def steps(self) -> builtins.list[dict]:
        rows = self.db.execute("SELECT items.id, items.kind, items.signature, items.device, steps.* FROM steps"
                               " JOIN items ON items.id = steps.item_id ORDER BY items.id").fetchall()
        return [{"id": r["id"], "kind": r["kind"], "signature": json.loads(r["signature"]), "device": r["device"],
                 **{k: r[k] for k in STEP_FIELDS}, "diagnosis": json.loads(r["diagnosis"])} for r in rows]

    def tuning_records(self, signature: dict | None = None) -> builtins.list[dict]:
        """The tuner's recorded steps ({changes, speedup_before, speedup_after}) on problems of this signature's
        class (problem_signature.problem_class, from the ops: entries stored under an older kind count), or all."""
        return self._step_records(("tuner",), "changes", signature)

    def genome_records(self, signature: dict | None = None) -> builtins.list[dict]:
        """The genome experts' recorded steps ({move, speedup_before, speedup_after}) on problems of this
        signature's class, or all: which composer moves paid off where."""
        return self._step_records(("recompose", "recombine"), "move", signature)

    def _step_records(self, experts: tuple[str, ...], key: str, signature: dict | None) -> builtins.list[dict]:
        """{key: what the experts' steps recorded under it, speedup_before, speedup_after} of their working
        children, on problems of the signature's class (or all)."""
        marks = ", ".join("?" for _ in experts)
        sql = ("SELECT items.data, items.signature, steps.speedup_before, steps.speedup_after FROM steps JOIN items"
               f" ON items.id = steps.item_id WHERE steps.expert IN ({marks}) AND steps.outcome = 'ok'")
        out = []
        for row in self.db.execute(sql, experts).fetchall():
            if signature and not same_class(signature, json.loads(row["signature"])):
                continue
            value = json.loads(row["data"] or "{}").get(key)
            if value:
                out.append({key: value, "speedup_before": row["speedup_before"], "speedup_after": row["speedup_after"]})
        return out

    def _retrievable(self) -> builtins.list[sqlite3.Row]:
        # steps that made things better are experience; failed ones reach experts through distilled insights
        return self.db.execute(
            "SELECT items.* FROM items LEFT JOIN steps ON steps.item_id = items.id WHERE items.type != 'step'"
            " OR (steps.outcome = 'ok' AND steps.speedup_after IS NOT NULL"
            "     AND (steps.speedup_before IS NULL OR steps.speedup_after > steps.speedup_before))"
            " ORDER BY items.id").fetchall()

    @staticmethod
    def _document(row: sqlite3.Row) -> str:
        sig = json.loads(row["signature"])
        return " ".join([row["title"], row["text"], sig.get("text", ""), row["kind"] or ""])

    def retrieve(self, signature: dict, query_text: str = "", k: int = 5,
                 semantic: bool | None = None) -> Retrieval:
        """The k items most useful for a problem with this signature, shaped for PromptContext.experience:
        {title, text, source, code?, score, why, similarity, id, type}. Only items that pass
        relevance() (the similarity floor) are retrieved; those of the problem's class come first, each tier by
        score (signature similarity plus BM25, plus the similarity of sentence embeddings with `semantic`: None
        uses them when the embedding model is installed, True insists on it). Empty when nothing is close
        enough: the Retrieval then says the floor and the best similarity seen."""
        rows = self._retrievable()
        query = " ".join([query_text, signature.get("text", ""), signature.get("kind", "")])
        text_scores = bm25_scores([self._document(r) for r in rows], query)
        if semantic is None:
            semantic = semantic_by_default()
        meaning_scores = self._embedding_scores(rows, query) if semantic and rows else None
        unmeasured = self._unmeasured_ids()
        passed, best = [], None
        for index, (row, text_score) in enumerate(zip(rows, text_scores)):
            item_sig = json.loads(row["signature"])
            sig_score = similarity(signature, item_sig)
            if meaning_scores is None:
                score = SIGNATURE_WEIGHT * sig_score + (1 - SIGNATURE_WEIGHT) * text_score
                text_match = text_score
            else:
                score = (SEMANTIC_WEIGHTS["signature"] * sig_score + SEMANTIC_WEIGHTS["bm25"] * text_score
                         + SEMANTIC_WEIGHTS["embedding"] * meaning_scores[index])
                text_match = text_score + meaning_scores[index]
            if best is None or sig_score > best[0]:
                best = (sig_score, row["title"])
            keep, same, why = relevance(signature, item_sig, sig_score, text_match, row["text"], row["origin"])
            if keep:
                # within a tier, measured experience first: an untimed step or an insight resting only on
                # such steps never outranks one that rests on a measurement, whatever its text score
                passed.append((not same, row["id"] in unmeasured, -score, row["id"], score, sig_score, why, row))
        passed.sort(key=lambda entry: entry[:4])
        by_signature = bool(signature.get("kind") or op_set(signature))
        return Retrieval(
            [self._experience(row, score, why=why, sig_score=sig_score if by_signature else None)
             for *_, score, sig_score, why, row in passed[:k]],
            best_similarity=round(best[0], 4) if best else None, best_title=best[1] if best else None,
            by_signature=by_signature)

    # --- embeddings ------------------------------------------------------------------------------
    @property
    def embedder(self) -> embeddings.Embedder:
        """The sentence embedder (loaded on first use; a UsageError when the model is not installed)."""
        if self._embedder is None:
            self._embedder = embeddings.Embedder()
        return self._embedder

    @staticmethod
    def _semantic_document(row: sqlite3.Row) -> str:
        code = embeddings.code_text(row["code"])[:EMBED_CODE_CHARS] if row["code"] else ""
        return " ".join(part for part in (row["title"], row["text"], code) if part)

    def _item_vectors(self, rows: builtins.list[sqlite3.Row]) -> np.ndarray:
        """The embedding of each row's document, from the embeddings table where it is there and current."""
        model = self.embedder.name
        cached = {r["item_id"]: (r["digest"], r["vector"]) for r in self.db.execute(
            "SELECT item_id, digest, vector FROM embeddings WHERE model = ?", (model,))}
        documents = [self._semantic_document(row) for row in rows]
        digests = [embeddings.text_digest(d) for d in documents]
        vectors: builtins.list[np.ndarray | None] = [
            np.frombuffer(cached[row["id"]][1], dtype="<f4") if cached.get(row["id"], ("",))[0] == digest else None
            for row, digest in zip(rows, digests)]
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            fresh = self.embedder.embed([documents[i] for i in missing], whole=False)
            with self.db:
                for i, vector in zip(missing, fresh):
                    vectors[i] = vector
                    self.db.execute("INSERT OR REPLACE INTO embeddings (item_id, model, digest, vector)"
                                    " VALUES (?, ?, ?, ?)",
                                    (rows[i]["id"], model, digests[i], vector.astype("<f4").tobytes()))
        return np.stack(vectors)

    def _embedding_scores(self, rows: builtins.list[sqlite3.Row], query: str) -> builtins.list[float]:
        if not query.strip():
            return [0.0] * len(rows)
        query_vector = self.embedder.embed([query], whole=False)[0]
        scores = [max(float(score), 0.0) for score in self._item_vectors(rows) @ query_vector]
        top = max(scores)
        return [score / top for score in scores] if top > 0 else scores

    def search(self, text: str, k: int = 10) -> builtins.list[dict]:
        """Items matching free text (BM25 alone), best first, the unmeasured (_unmeasured_ids) after the rest;
        items that match nothing are left out."""
        rows = self.db.execute("SELECT * FROM items ORDER BY id").fetchall()
        scores = bm25_scores([self._document(r) for r in rows], text)
        unmeasured = self._unmeasured_ids()
        ranked = sorted((pair for pair in zip(scores, rows) if pair[0] > 0),
                        key=lambda p: (p[1]["id"] in unmeasured, -p[0], p[1]["id"]))
        return [self._experience(row, score, why="text match") for score, row in ranked[:k]]

    def _experience(self, row: sqlite3.Row, score: float, why: str = "", sig_score: float | None = None) -> dict:
        origin = {"seed": "seed library", "run": "an earlier run", "rule": "distilled from earlier runs",
                  "llm": "an LLM's summary of earlier runs"}.get(row["origin"], row["origin"])
        where = f"library #{row['id']} ({row['type']}, {origin}" + (f", {row['device']}" if row["device"] else "") + ")"
        item = {"title": row["title"], "text": row["text"], "source": where, "score": round(score, 4), "why": why,
                "id": row["id"], "type": row["type"]}
        if sig_score is not None:
            item["similarity"] = round(sig_score, 4)
        if row["code"]:
            item["code"] = row["code"]
        return item

    def stats(self) -> dict:
        def counts(sql: str) -> dict:
            return {str(r[0]): r[1] for r in self.db.execute(sql)}

        return {
            "path": str(self.path),
            "schema_version": self.schema_version,
            "seed_version": int(self._meta("seed_version") or 0),
            "items": self.db.execute("SELECT COUNT(*) FROM items").fetchone()[0],
            "by_type": counts("SELECT type, COUNT(*) FROM items GROUP BY type ORDER BY type"),
            "by_kind": counts("SELECT COALESCE(kind, 'none'), COUNT(*) FROM items GROUP BY 1 ORDER BY 1"),
            "by_origin": counts("SELECT origin, COUNT(*) FROM items GROUP BY origin ORDER BY origin"),
            "step_outcomes": counts("SELECT outcome, COUNT(*) FROM steps GROUP BY outcome ORDER BY outcome"),
        }

    # --- exchange --------------------------------------------------------------------------------
    def export(self, path: str | Path) -> int:
        """Write every item as one JSON line (steps with their step fields); returns the count."""
        ids = [r[0] for r in self.db.execute("SELECT id FROM items ORDER BY id")]
        uid_of = {r[0]: r[1] for r in self.db.execute("SELECT id, uid FROM items")}
        with open(path, "w", encoding="utf-8") as out:
            for item_id in ids:
                item = self.get(item_id)
                if item["type"] == "insight":
                    item["evidence_uids"] = [uid_of[i] for i in item.get("evidence", []) if i in uid_of]
                out.write(json.dumps(item, sort_keys=True) + "\n")
        return len(ids)

    def import_(self, path: str | Path) -> int:
        """Add the items of an export not already here (by uid); returns how many were added."""
        path = Path(path)
        if not path.is_file():
            raise LibraryError(f"import file not found: {path}")
        items = []
        try:
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                item = json.loads(line)
                if not isinstance(item, dict) or item.get("type") not in ITEM_TYPES or "uid" not in item:
                    raise ValueError("not a library item (needs uid and type kernel, insight or step)")
                items.append(item)
        except (ValueError, UnicodeDecodeError) as exc:
            raise LibraryError(f"{path} line {n}: {exc}") from None
        added = 0
        with self.db:
            for item in sorted(items, key=lambda i: i["type"] == "insight"):  # evidence before insights
                data = {}
                if item["type"] == "insight":
                    known = {r[1]: r[0] for r in self.db.execute("SELECT id, uid FROM items")}
                    data["evidence"] = [known[u] for u in item.get("evidence_uids", []) if u in known]
                new_id = self._insert(item["type"], uid=item["uid"], title=item.get("title", ""),
                                      signature=item.get("signature") or {}, text=item.get("text") or "",
                                      code=item.get("code"), origin=item.get("origin", "run"),
                                      device=item.get("device"), speedup=item.get("speedup"), data=data,
                                      created=item.get("created"))
                if new_id is None:
                    continue
                added += 1
                if item["type"] == "step":
                    self.db.execute(
                        "INSERT INTO steps (item_id, run_id, expert, outcome, diagnosis, speedup_before,"
                        " speedup_after, parent_source, child_source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (new_id, item.get("run_id"), item.get("expert", "unknown"), item.get("outcome", "unknown"),
                         json.dumps(item.get("diagnosis") or []), item.get("speedup_before"),
                         item.get("speedup_after"), item.get("parent_source"), item.get("child_source") or ""))
        return added
