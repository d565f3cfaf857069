"""kfoundry.sqlite_files: damage met at open or at any later query (execute, fetch, iteration) is a
DamagedFile that names the file and the way out; what is not damage stays the sqlite3 error it is."""

from __future__ import annotations

import random
import sqlite3

import pytest

from kfoundry.errors import KFoundryError
from kfoundry.sqlite_files import DamagedFile, connect, is_damage

WAY_OUT = "move it aside"


def _filled(path):
    conn = connect(path, WAY_OUT)
    conn.execute("CREATE TABLE t (a TEXT)")
    conn.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 2000)
    conn.commit()
    conn.close()


def _noise(path, start: int, length: int) -> None:
    data = bytearray(path.read_bytes())
    rng = random.Random(7)
    for i in range(start, min(len(data), start + length)):
        data[i] = rng.randrange(256)
    path.write_bytes(bytes(data))


def test_a_healthy_file_reads_and_writes_as_with_sqlite3(tmp_path):
    path = tmp_path / "ok.sqlite"
    _filled(path)
    conn = connect(path, WAY_OUT)
    conn.row_factory = sqlite3.Row
    assert conn.execute("SELECT COUNT(*) AS n FROM t").fetchone()["n"] == 2000
    assert sum(1 for _ in conn.execute("SELECT a FROM t")) == 2000
    conn.close()


def test_damage_in_the_middle_is_met_at_a_query_and_named(tmp_path):
    path = tmp_path / "middle.sqlite"
    _filled(path)
    _noise(path, path.stat().st_size // 2, 8192)
    conn = connect(path, WAY_OUT)  # the header is whole: it opens
    with pytest.raises(DamagedFile) as info:
        for _ in conn.execute("SELECT a FROM t"):
            pass
    assert isinstance(info.value, KFoundryError) and info.value.path == path
    assert str(info.value).startswith(f"{path} is damaged (") and str(info.value).endswith(WAY_OUT)


def test_a_damaged_header_is_met_at_the_first_query(tmp_path):
    path = tmp_path / "header.sqlite"
    _filled(path)
    _noise(path, 0, 100)
    with pytest.raises(DamagedFile, match="file is not a database"):
        connect(path, WAY_OUT).execute("SELECT * FROM t").fetchall()


def test_what_is_not_damage_stays_a_sqlite3_error(tmp_path):
    conn = connect(tmp_path / "fine.sqlite", WAY_OUT)
    conn.execute("CREATE TABLE u (a INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO u VALUES (1)")
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        conn.execute("SELECT * FROM nowhere")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO u VALUES (1)")
    assert not is_damage(sqlite3.OperationalError("database is locked"))
    assert is_damage(sqlite3.DatabaseError("database disk image is malformed"))
    conn.close()
