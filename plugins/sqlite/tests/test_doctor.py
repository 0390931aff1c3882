"""``memvault doctor``'s integrity check of a sqlite store (memvault_sqlite.checks)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import memvault
from memvault_sqlite.checks import integrity_problems, store_checks


def _tagged_store(path: Path) -> None:
    with memvault.open("sqlite", path=str(path)) as vault:
        for n in range(3):
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="acme",
                    agent_id="a1",
                    tier="pins",
                    content=f"Order {n} ships Friday.\n",
                    mode="append",
                    data_subject_id=f"customer-{n}",
                )
            )


def test_a_healthy_store_with_data_subjects_is_reported_healthy(tmp_path: Path) -> None:
    # SQLite 3.40.0-3.41.0 (the one Python links on these machines) reports "NULL value in
    # document_subjects.workspace_id" for a store whose column holds no NULL; the doctor told the
    # operator to restore a backup of a healthy file.
    _tagged_store(tmp_path / "m.db")
    checks = {c.name: c for c in store_checks({"path": str(tmp_path / "m.db")})}
    assert checks["integrity"].status == "ok", checks["integrity"].detail


def test_a_real_null_is_still_reported(tmp_path: Path) -> None:
    _tagged_store(tmp_path / "m.db")
    conn = sqlite3.connect(tmp_path / "m.db")
    conn.execute("PRAGMA ignore_check_constraints = ON")
    # A NULL where NOT NULL is declared, written behind the schema's back (writable_schema drops the check).
    conn.execute("PRAGMA writable_schema = ON")
    sql = conn.execute("SELECT sql FROM sqlite_schema WHERE name = 'document_subjects'").fetchone()[0]
    conn.execute(
        "UPDATE sqlite_schema SET sql = ? WHERE name = 'document_subjects'",
        (sql.replace("workspace_id TEXT NOT NULL", "workspace_id TEXT"),),
    )
    conn.commit()
    conn.close()
    conn = sqlite3.connect(tmp_path / "m.db")
    conn.execute("UPDATE document_subjects SET workspace_id = NULL WHERE data_subject_id = 'customer-1'")
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_schema SET sql = ? WHERE name = 'document_subjects'", (sql,))
    conn.commit()
    conn.close()
    conn = sqlite3.connect(tmp_path / "m.db")
    try:
        assert set(integrity_problems(conn)) == {"NULL value in document_subjects.workspace_id"}
    finally:
        conn.close()
    checks = {c.name: c for c in store_checks({"path": str(tmp_path / "m.db")})}
    assert checks["integrity"].status == "fail"
    assert "document_subjects.workspace_id" in checks["integrity"].detail


def test_only_the_two_check_pragmas_are_run(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db")
    try:
        with pytest.raises(ValueError, match="quick_check or integrity_check"):
            integrity_problems(conn, "writable_schema = ON")
    finally:
        conn.close()
