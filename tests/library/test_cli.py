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
    assert result.exit_code == 2 and "is damaged (file is not a database)" in result.output


def test_export_import(tmp_path):
    db = tmp_path / "lib.sqlite"
    with Library(db) as lib:
        lib.record_step(GEMM_SIG, "fusion", None, "x = 1\n", ["memory-bound"], "ok", None, 1.2, "H200")
    out = tmp_path / "lib.jsonl"
    result = _run("export", out, "--library", db, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["exported"] == 11
    result = _run("import", out, "--library", tmp_path / "other.sqlite")
    assert result.exit_code == 0 and "imported 1 new items" in result.stdout


def _damage(path, where: str) -> None:
    """Random bytes over the file's header, over 8 KiB of its middle, or over its last 8 KiB."""
    import random

    data = bytearray(path.read_bytes())
    rng = random.Random(7)
    start = {"header": 0, "middle": len(data) // 2, "end": max(0, len(data) - 8192)}[where]
    length = 100 if where == "header" else 8192
    for i in range(start, min(len(data), start + length)):
        data[i] = rng.randrange(256)
    path.write_bytes(bytes(data))


def test_a_damaged_library_is_one_line_and_exit_2_at_open_or_at_any_query(tmp_path):
    for where in ("header", "middle", "end"):
        db = tmp_path / f"lib-{where}.sqlite"
        with Library(db) as lib:  # the seed: a few hundred KB
            lib.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        _damage(db, where)
        codes = []
        for command in (("stats",), ("list",), ("search", "softmax rows"), ("export", tmp_path / "out.jsonl")):
            result = _run(*command, "--library", db)
            assert result.exception is None or isinstance(result.exception, SystemExit), (where, command,
                                                                                           result.output)
            codes.append(result.exit_code)
            if result.exit_code:
                assert result.exit_code == 2, (where, command, result.output)
                lines = result.output.strip().splitlines()
                assert len(lines) == 1 and str(db) in lines[0] and "move it aside" in lines[0], (where, command,
                                                                                                 result.output)
        if where == "header":
            assert set(codes) == {2}  # not a database at all
        if where == "middle":
            assert 2 in codes  # 8 KiB of noise mid-file: some query meets it


def test_show_gives_a_steps_speedups_as_measured(tmp_path):
    db = tmp_path / "lib.sqlite"
    library = Library(db)
    timed = library.record_step(GEMM_SIG, "tuner", "a = 1\n", "a = 2\n", [], "ok", 1.2, 1.5, run_id="r")
    untimed = library.record_step(GEMM_SIG, "tuner", "a = 1\n", "a = 3\n", [], "ok", None, None, run_id="r")
    failed = library.record_step(GEMM_SIG, "repair", "a = 1\n", "a = 4\n", [], "compile_error", 1.2, None, run_id="r")
    library.close()
    assert "speedup: 1.2x -> 1.5x" in _run("show", timed, "--library", db).stdout
    assert "speedup: not measured" in _run("show", untimed, "--library", db).stdout
    assert "speedup: none (failed)" in _run("show", failed, "--library", db).stdout
