import sqlite3

import pytest

from kfoundry.library import Library, LibraryError
from kfoundry.library.schema import SCHEMA_VERSION
from tests.library.conftest import GEMM_SIG

PARENT = "def f(x):\n    return x\n"
CHILD = "def f(x):\n    return x * 2\n"


def test_record_step_stores_diff_and_fields(lib):
    step_id = lib.record_step(GEMM_SIG, "fusion", PARENT, CHILD, ["memory-bound"], "ok", 1.0, 1.4, "H200", "run-1")
    item = lib.get(step_id)
    assert item["type"] == "step" and item["kind"] == "gemm+pointwise"
    assert item["expert"] == "fusion" and item["diagnosis"] == ["memory-bound"]
    assert item["speedup_before"] == 1.0 and item["speedup_after"] == 1.4 and item["run_id"] == "run-1"
    assert "-    return x\n" in item["diff"] and "+    return x * 2\n" in item["diff"]
    assert item["child_source"] == CHILD and item["parent_source"] == PARENT


def test_add_kernel_and_insight_list_get(lib):
    kid = lib.add_kernel("my gemm", GEMM_SIG, "code()", "notes", 2.0, "H200", "run")
    iid = lib.add_insight("tile 128x128 wins", GEMM_SIG, [kid], "llm")
    assert lib.get(kid)["code"] == "code()" and lib.get(iid)["evidence"] == [kid]
    kinds = {i["id"] for i in lib.list(kind="gemm+pointwise")}
    assert {kid, iid} <= kinds
    assert all(i["type"] == "insight" for i in lib.list(type="insight"))
    assert lib.add_kernel("my gemm", GEMM_SIG, "code()", "notes", 2.0, "H200", "run") == kid  # no duplicate
    with pytest.raises(LibraryError):
        lib.add_kernel("x", GEMM_SIG, "code()", origin="elsewhere")


def test_missing_id_is_a_library_error(lib):
    with pytest.raises(LibraryError, match="no library item with id 9999"):
        lib.get(9999)


def test_reopen_keeps_data_schema_and_does_not_reseed(tmp_path):
    path = tmp_path / "lib.sqlite"
    with Library(path) as first:
        step_id = first.record_step(GEMM_SIG, "tuner", None, CHILD, [], "ok", None, 1.1)
        count = first.stats()["items"]
    with Library(path) as second:
        assert second.schema_version == SCHEMA_VERSION
        assert second.stats()["items"] == count
        assert second.get(step_id)["expert"] == "tuner"
        assert second.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_newer_schema_and_foreign_sqlite_are_refused(tmp_path):
    path = tmp_path / "lib.sqlite"
    Library(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(LibraryError, match="newer"):
        Library(path)
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(LibraryError, match="not a kfoundry library"):
        Library(other)


def test_a_version_1_library_gains_the_embeddings_table(tmp_path):
    path = tmp_path / "lib.sqlite"
    with Library(path) as first:
        step_id = first.record_step(GEMM_SIG, "tuner", None, CHILD, [], "ok", None, 1.1)
    with sqlite3.connect(path) as db:  # as a library written before semantic retrieval
        db.execute("DROP TABLE embeddings")
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    with Library(path) as upgraded:
        assert upgraded.schema_version == SCHEMA_VERSION == 2
        tables = {r[0] for r in upgraded.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "embeddings" in tables and upgraded.get(step_id)["expert"] == "tuner"


def test_export_import_round_trip(tmp_path, lib):
    sid = lib.record_step(GEMM_SIG, "fusion", PARENT, CHILD, ["memory-bound"], "ok", 1.0, 1.5, "H200")
    lib.add_insight("evidence-backed", GEMM_SIG, [sid], "llm")
    out = tmp_path / "export.jsonl"
    assert lib.export(out) == lib.stats()["items"]
    with Library(tmp_path / "other.sqlite") as other:
        assert other.import_(out) == 2  # the seed is there already
        assert other.import_(out) == 0  # idempotent
        step = [i for i in other.list(type="step")][0]
        assert other.get(step["id"])["diagnosis"] == ["memory-bound"]
        insight = [i for i in other.list(type="insight") if i["title"] == "evidence-backed"][0]
        assert insight["evidence"] == [step["id"]]
        assert other.stats()["items"] == lib.stats()["items"]


def test_import_bad_file(tmp_path, lib):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(LibraryError, match="line 1"):
        lib.import_(bad)
    with pytest.raises(LibraryError, match="not found"):
        lib.import_(tmp_path / "missing.jsonl")
