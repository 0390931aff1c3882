"""Schema creation and versioned migrations (PRAGMA user_version)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from sqlite_helpers import recall, retain

import memvault
from memvault_sqlite.schema import SCHEMA_VERSION

# The version-1 shape as the 0.0.x pre-releases wrote it, kept here by hand.
V1_SQL = """
CREATE TABLE documents (
    workspace_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    crew_id TEXT NOT NULL DEFAULT '',
    tier TEXT NOT NULL,
    key TEXT NOT NULL DEFAULT '',
    body TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, agent_id, crew_id, tier, key)
);
INSERT INTO documents VALUES ('w1', 'a1', '', 'AGENT', '', 'Prefers metric units.
Lives in Lyon.', '2025-01-02T03:04:05+00:00');
INSERT INTO documents VALUES ('w1', 'a1', '', 'daily', '2025-01-02', 'met the walrus keeper
', '2025-01-02T03:04:05+00:00');
INSERT INTO documents VALUES ('w1', '', 'c1', 'CREW', '', 'crew rule: tea at five', '2025-01-02T03:04:05+00:00');
PRAGMA user_version = 1;
"""


def make_v1(path: Path) -> None:
    conn = sqlite3.connect(str(path))
    conn.executescript(V1_SQL)
    conn.close()


def user_version(path: Path) -> int:
    conn = sqlite3.connect(str(path))
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def test_new_file_is_created_with_current_schema(db_path: Path) -> None:
    memvault.open("sqlite", path=str(db_path), scanner="off").close()
    assert user_version(db_path) == SCHEMA_VERSION


def test_default_path_is_memvault_db_in_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    memvault.open("sqlite", scanner="off").close()
    assert (tmp_path / "memvault.db").is_file()


def test_v1_database_opens_and_upgrades_keeping_its_documents(db_path: Path) -> None:
    make_v1(db_path)
    with memvault.open("sqlite", path=str(db_path), scanner="off") as vault:
        body = vault.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="AGENT")).content
        assert body == "Prefers metric units.\nLives in Lyon."
        assert [h.source for h in recall(vault, "walrus")] == ["daily/2025-01-02.md"]
        assert [h.source for h in recall(vault, "tea", crew_id="c1", agent_id="")] == ["CREW.md"]
        # v4 backfilled each migrated document's digest
        assert recall(vault, "metric")[0].digest == hashlib.sha256(body.encode("utf-8")).hexdigest()
        retain(vault, "\nLikes jazz.")
        assert recall(vault, "jazz")[0].line == 3
    assert user_version(db_path) == SCHEMA_VERSION


def test_newer_schema_is_a_clear_error_at_open(db_path: Path) -> None:
    memvault.open("sqlite", path=str(db_path), scanner="off").close()
    conn = sqlite3.connect(str(db_path))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(memvault.UpstreamError, match="newer"):
        memvault.open("sqlite", path=str(db_path), scanner="off")


def test_database_of_another_application_is_refused(db_path: Path) -> None:
    conn = sqlite3.connect(str(db_path))
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    conn.close()
    with pytest.raises(memvault.InvalidRequest, match="another application"):
        memvault.open("sqlite", path=str(db_path), scanner="off")


def test_memory_path_gives_a_working_private_database() -> None:
    with memvault.open("sqlite", path=":memory:", scanner="off") as vault:
        retain(vault, "ephemeral otter\n")
        assert recall(vault, "otter")[0].snippet == "ephemeral otter"
        assert vault.health().ok
    with memvault.open("sqlite", path=":memory:", scanner="off") as other:
        assert recall(other, "otter") == []
