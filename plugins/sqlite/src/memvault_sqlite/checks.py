"""``memvault doctor``'s checks of a sqlite store: its schema version and integrity, read-only.

Registered as the provider's ``checks=``; the doctor runs them for a configured
sqlite store before it opens it. They never create or change the file: a path
that holds no SQLite database yet is left to the doctor's own report.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from memvault.contract.registration import DoctorCheck
from memvault_sqlite import schema

__all__ = ["integrity_problems", "store_checks"]

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_NULL_VALUE: Final = re.compile(r"NULL value in (\w+)\.(\w+)")


def integrity_problems(conn: sqlite3.Connection, pragma: str = "quick_check") -> list[str]:
    """What ``PRAGMA quick_check`` (or ``integrity_check``) finds wrong in ``conn``'s database; empty: nothing.

    SQLite 3.40.0 to 3.41.0 report "NULL value in T.C" for NOT NULL columns of a WITHOUT ROWID
    table whose primary key is not its leading columns (``document_subjects``) when the column
    holds no NULL at all. Each such report is checked with a query of the column and dropped
    when the column holds none; every other report stands.
    """
    if pragma not in ("quick_check", "integrity_check"):
        raise ValueError(f"pragma must be quick_check or integrity_check, got {pragma!r}")
    verdict = [str(row[0]) for row in conn.execute(f"PRAGMA {pragma}").fetchall()]
    if verdict == ["ok"]:
        return []
    problems = []
    for message in verdict:
        found = _NULL_VALUE.fullmatch(message)
        if found is not None and _holds_no_null(conn, found.group(1), found.group(2)):
            continue
        problems.append(message)
    return problems


def _holds_no_null(conn: sqlite3.Connection, table: str, column: str) -> bool:
    names = {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    if table not in names or column not in {str(row[1]) for row in conn.execute(f'PRAGMA table_info("{table}")')}:
        return False
    # typeof(): SQLite folds "column IS NULL" to false for a NOT NULL column, the very claim in doubt.
    query = f'SELECT NOT EXISTS (SELECT 1 FROM "{table}" WHERE typeof("{column}") = \'null\')'
    return bool(conn.execute(query).fetchone()[0] == 1)


def store_checks(settings: Mapping[str, Any]) -> Iterator[DoctorCheck]:
    """The findings for the store at ``settings["path"]`` (the provider's default when unset)."""
    path = Path(str(settings.get("path", "memvault.db")))
    if str(path) == ":memory:" or not path.is_file():
        return
    yield from _sqlite_file(path)


def _sqlite_file(path: Path) -> Iterator[DoctorCheck]:
    """Schema version and integrity of an SQLite store, opened read-only."""
    try:
        with path.open("rb") as handle:
            if handle.read(16) != _SQLITE_MAGIC:
                return
    except OSError:
        return
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        yield DoctorCheck("database", "fail", f"{path}: cannot be opened read-only: {exc}", "check its permissions")
        return
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        problems = integrity_problems(conn)
    except sqlite3.Error as exc:
        yield DoctorCheck(
            "database", "fail", f"{path}: {exc}", "restore it from a backup (see the sqlite provider's docs)"
        )
        return
    finally:
        conn.close()
    known = int(schema.SCHEMA_VERSION)
    if version > known:
        yield DoctorCheck(
            "schema",
            "fail",
            f"{path}: schema version {version}, newer than the {known} installed code knows",
            "upgrade memvault-sqlite",
        )
    elif version < known:
        yield DoctorCheck(
            "schema",
            "warn",
            f"{path}: schema version {version}; {known} after the next open (it migrates)",
            "back the file up first; the next open migrates it",
        )
    else:
        yield DoctorCheck("schema", "ok", f"{path}: schema version {version}")
    if not problems:
        yield DoctorCheck("integrity", "ok", f"{path}: quick_check ok")
    else:
        yield DoctorCheck(
            "integrity",
            "fail",
            f"{path}: {'; '.join(problems[:3])}",
            "stop the writers and restore the file from a backup",
        )
