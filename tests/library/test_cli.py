import json

from typer.testing import CliRunner

from kfoundry.library import Library
from kfoundry.library.cli import library_app
from tests.library.conftest import GEMM_SIG

runner = CliRunner()


def _run(*args):
    return runner.invoke(library_app, [str(a) for a in args])


def test_list_stats_search_show(tmp_path):
    db = tmp_path / "lib.sqlite"
    result = _run("list", "--library", db, "--json")
    assert result.exit_code == 0, result.output
    items = json.loads(result.stdout)["items"]
    assert len(items) == 10
    assert "GEMM with a fused epilogue" in _run("list", "--library", db).stdout
    stats = json.loads(_run("stats", "--library", db, "--json").stdout)
    assert stats["by_type"]["kernel"] == 6
    found = json.loads(_run("search", "row softmax", "--library", db, "--json").stdout)["results"]
    assert found[0]["title"].startswith("Row softmax")
    shown = _run("show", found[0]["id"], "--library", db)
    assert shown.exit_code == 0 and "_softmax_kernel" in shown.stdout
    assert json.loads(_run("show", found[0]["id"], "--library", db, "--json").stdout)["type"] == "kernel"


def test_missing_id_and_bad_import_exit_2(tmp_path):
    db = tmp_path / "lib.sqlite"
    result = _run("show", 4242, "--library", db)
    assert result.exit_code == 2 and "no library item with id 4242" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "nonsense"}\n')
    result = _run("import", bad, "--library", db)
    assert result.exit_code == 2 and "not a library item" in result.output
    result = _run("import", tmp_path / "nope.jsonl", "--library", db)
    assert result.exit_code == 2 and "not found" in result.output
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not sqlite at all" * 100)
    result = _run("stats", "--library", garbage)
    assert result.exit_code == 2 and "cannot open library" in result.output


def test_export_import(tmp_path):
    db = tmp_path / "lib.sqlite"
    with Library(db) as lib:
        lib.record_step(GEMM_SIG, "fusion", None, "x = 1\n", ["memory-bound"], "ok", None, 1.2, "H200")
    out = tmp_path / "lib.jsonl"
    result = _run("export", out, "--library", db, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["exported"] == 11
    result = _run("import", out, "--library", tmp_path / "other.sqlite")
    assert result.exit_code == 0 and "imported 1 new items" in result.stdout
