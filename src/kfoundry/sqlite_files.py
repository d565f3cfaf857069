"""The SQLite files kfoundry keeps (the experience library, each run's store): a damaged one, found at
open or at any query, raises DamagedFile, a KFoundryError that names the file and the way out, so the
CLI prints one line and exits with code 2 instead of a traceback.

Only damage is translated: "file is not a database", "database disk image is malformed", a text cell
that no longer decodes, an I/O error. A locked database, a constraint or a schema mismatch stays the
sqlite3 error it is.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from kfoundry.errors import KFoundryError, brief

DAMAGE_MARKERS = ("malformed", "not a database", "could not decode", "disk i/o error", "database corrupt")


class DamagedFile(KFoundryError):
    def __init__(self, path: str | Path, cause: BaseException, way_out: str) -> None:
        self.path, self.cause = Path(path), cause
        super().__init__(f"{path} is damaged ({brief(cause)}): {way_out}")


def is_damage(exc: BaseException) -> bool:
    if type(exc) is sqlite3.DatabaseError:  # noqa: E721 -- the base class itself: SQLITE_CORRUPT, SQLITE_NOTADB
        return True
    return isinstance(exc, sqlite3.OperationalError) and any(m in str(exc).lower() for m in DAMAGE_MARKERS)


class _Translating:
    """Turns damage met by one of the wrapped calls into DamagedFile."""

    _kf_path: str = ""
    _kf_way_out: str = ""

    def _kf_call(self, method, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except sqlite3.DatabaseError as exc:
            if is_damage(exc):
                raise DamagedFile(self._kf_path, exc, self._kf_way_out) from None
            raise


class _Cursor(_Translating, sqlite3.Cursor):
    def execute(self, *args: Any, **kwargs: Any) -> Any:
        return self._kf_call(super().execute, *args, **kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        return self._kf_call(super().executemany, *args, **kwargs)

    def fetchone(self) -> Any:
        return self._kf_call(super().fetchone)

    def fetchmany(self, *args: Any, **kwargs: Any) -> Any:
        return self._kf_call(super().fetchmany, *args, **kwargs)

    def fetchall(self) -> Any:
        return self._kf_call(super().fetchall)

    def __next__(self) -> Any:
        return self._kf_call(super().__next__)


class _Connection(_Translating, sqlite3.Connection):
    def cursor(self, factory: Any = None) -> Any:
        cursor = super().cursor(factory or _Cursor)
        if isinstance(cursor, _Translating):
            cursor._kf_path, cursor._kf_way_out = self._kf_path, self._kf_way_out
        return cursor

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        return self.cursor().execute(*args, **kwargs)  # the cursor translates

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        return self.cursor().executemany(*args, **kwargs)

    def executescript(self, *args: Any, **kwargs: Any) -> Any:
        return self._kf_call(super().executescript, *args, **kwargs)

    def commit(self) -> None:
        self._kf_call(super().commit)


def connect(path: str | Path, way_out: str, **kwargs: Any) -> sqlite3.Connection:
    """sqlite3.connect, with damage at open or at any later query raised as DamagedFile(path, way_out)."""
    try:
        conn = sqlite3.connect(str(path), factory=_Connection, **kwargs)
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise DamagedFile(path, exc, way_out) from None
        raise
    conn._kf_path, conn._kf_way_out = str(path), way_out
    return conn
