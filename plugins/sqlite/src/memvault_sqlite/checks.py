"""``memvault doctor``'s checks of a sqlite store: its schema version and integrity, read-only.

Registered as the provider's ``checks=``; the doctor runs them for a configured
sqlite store before it opens it. They never create or change the file: a path
that holds no SQLite database yet is left to the doctor's own report.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from memvault.contract.registration import DoctorCheck
from memvault_sqlite import schema

__all__ = ["store_checks"]

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"


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
        verdict = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
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
    if verdict == ["ok"]:
        yield DoctorCheck("integrity", "ok", f"{path}: quick_check ok")
    else:
        yield DoctorCheck(
            "integrity",
            "fail",
            f"{path}: {'; '.join(verdict[:3])}",
            "stop the writers and restore the file from a backup",
        )
