"""health: a fresh connection, a query and a rolled-back write probe, within the deadline (P25-P27)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

from sqlite_helpers import retain

import memvault
from memvault_sqlite.schema import SCHEMA_VERSION


def test_healthy_database_reports_ok_with_empty_message_p25(vault: memvault.Vault) -> None:
    status = vault.health()
    assert status.ok
    assert status.message == ""
    assert status.checked_at.tzinfo is not None


def test_probe_leaves_nothing_behind_p27(vault: memvault.Vault, db_path: Path) -> None:
    retain(vault, "x\n")
    for _ in range(3):
        assert vault.health().ok
    conn = sqlite3.connect(str(db_path))
    assert conn.execute("SELECT count(*) FROM probe").fetchone()[0] == 0
    conn.close()


def test_missing_directory_after_open_is_reported_p27(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    with memvault.open("sqlite", path=str(folder / "m.db"), scanner="off") as vault:
        shutil.rmtree(folder)
        status = vault.health()
    assert not status.ok
    assert "directory" in status.message
    assert "missing" in status.message


def replace_with(path: Path, data: bytes) -> None:
    """Put a new file at ``path`` (rename over it, as an editor or a deploy script would).

    Never write into the open database file from this process: closing that
    descriptor would drop the fcntl locks of the vault's own connections.
    """
    new = path.with_name(path.name + ".new")
    new.write_bytes(data)
    os.replace(new, path)


def test_file_replaced_by_non_sqlite_is_reported_p27(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off") as vault:
        replace_with(db_path, b"not a database at all" * 50)
        status = vault.health()
    assert not status.ok
    assert "replaced" in status.message


def test_newer_schema_is_reported_p27(vault: memvault.Vault, db_path: Path) -> None:
    conn = sqlite3.connect(str(db_path))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    status = vault.health()
    assert not status.ok
    assert "newer" in status.message


def test_failure_messages_are_distinct_p27(tmp_path: Path) -> None:
    messages = set()
    for case in ("dir", "file", "schema"):
        folder = tmp_path / case
        folder.mkdir()
        path = folder / "m.db"
        with memvault.open("sqlite", path=str(path), scanner="off") as vault:
            if case == "dir":
                shutil.rmtree(folder)
            elif case == "file":
                replace_with(path, b"garbage" * 100)
            else:
                conn = sqlite3.connect(str(path))
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
                conn.close()
            status = vault.health()
        assert not status.ok
        messages.add(status.message.split(":")[0].replace(str(folder), ""))
    assert len(messages) == 3


def test_held_write_lock_reports_within_deadline_p26(vault: memvault.Vault, db_path: Path) -> None:
    blocker = sqlite3.connect(str(db_path), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        start = time.monotonic()
        status = vault.health()
        assert time.monotonic() - start < 0.5
        assert not status.ok
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert vault.health().ok


def test_a_write_of_this_process_under_way_is_busy_not_a_stuck_database_p25(vault: memvault.Vault) -> None:
    """P25: a write of this process that holds the writer queue past the probe's wait without committing (an
    fsync on a loaded disk, a thread the scheduler put aside) is a busy database: health says ok. The clean
    clone's CI run saw the sqlite parity test of health under load fail on it."""
    writers = vault.provider.db._writers  # type: ignore[attr-defined]
    assert writers.acquire(1.0)
    try:
        status = vault.health()  # the probe waits 100 ms for the queue and sees no commit
    finally:
        writers.release()
    assert status.ok, status.message


def test_a_write_of_this_process_held_past_the_writers_timeout_is_reported_p26(db_path: Path) -> None:
    """P26: ... but one that has held the queue longer than any writer waits for its turn (``timeout``) makes
    every other write fail: health reports the long write."""
    with memvault.open("sqlite", path=str(db_path), timeout=0.3) as vault:
        writers = vault.provider.db._writers  # type: ignore[attr-defined]
        assert writers.acquire(1.0)
        try:
            time.sleep(0.35)
            status = vault.health()
        finally:
            writers.release()
        assert not status.ok
        assert "long write" in status.message
        assert vault.health().ok
