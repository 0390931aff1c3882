"""Erasures never leave the search index unreadable, however many there are.

Each forget rewrites its FTS5 shard as one segment (``optimize``), so the erased
terms leave the index (P24). On SQLite 3.40 an ``optimize`` after new writes moves the
index up a level, two per forget in a steady cycle of appends and forgets, and past
2,000 levels SQLite calls the database malformed: every retain and recall of the
shard's partitions failed after about 1,300 such forgets. The provider now rebuilds a
shard from its lines when its index grows deeper than ``FTS_MAX_LEVELS``, and at open
mends a shard an earlier release left too deep or malformed.
"""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

import memvault
from memvault_sqlite import schema


def _append(day: str, text: str) -> memvault.RetainRequest:
    return memvault.RetainRequest(workspace_id="w", agent_id="a", tier="daily", key=day, content=text, mode="append")


def _note(i: int) -> memvault.RetainRequest:
    return _append(f"{2000 + i // 300}-{1 + (i // 25) % 12:02d}-{1 + i % 25:02d}", f"kept note {i} about the walrus\n")


def _levels(db_path: Path) -> tuple[int, int | None]:
    """The shard holding the database's one partition, and how many levels its index has."""
    with closing(sqlite3.connect(db_path)) as conn:
        shard = conn.execute("SELECT id FROM partitions").fetchone()[0] % schema.FTS_SHARDS
        return shard, schema.fts_levels(conn, shard)


def _recall(vault: memvault.Vault, query: str, limit: int = 20) -> list[tuple[str, int, str]]:
    request = memvault.RecallRequest(workspace_id="w", agent_id="a", query=query, limit=limit)
    return [(hit.source, hit.line, hit.snippet) for hit in vault.recall(request).hits]


def test_forgets_between_appends_never_leave_the_search_index_malformed(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off") as vault:
        for i in range(2000):  # the index was malformed after about 1,300 of these
            vault.retain(_note(i))
            vault.retain(_append("2099-01-01", f"scratch {i}\n"))
            vault.forget(memvault.ForgetRequest(workspace_id="w", agent_id="a", id="daily/2099-01-01.md"))
        hits = _recall(vault, "walrus note 1999")
        assert hits[0][2] == "kept note 1999 about the walrus"
        assert len(_recall(vault, "walrus")) == 20
        assert _recall(vault, "scratch") == []
        vault.retain(_note(2000))  # writes still work too
        _, levels = _levels(db_path)
        assert levels is not None
        assert levels <= schema.FTS_MAX_LEVELS


def _deepen(db_path: Path, shard: int, *, cycles: int) -> None:
    """What an earlier release's forgets did to a shard: a row written, erased, and the index optimized."""
    table = f"lines_fts_{shard}"
    with closing(sqlite3.connect(db_path, isolation_level=None)) as conn:
        for i in range(cycles):
            try:
                conn.execute(f"INSERT INTO {table} (rowid, terms) VALUES (?, 'scratch')", (1 << 62 | i,))
                conn.execute(
                    f"INSERT INTO {table} ({table}, rowid, terms) VALUES ('delete', ?, 'scratch')", (1 << 62 | i,)
                )
                conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
            except sqlite3.DatabaseError:
                break  # malformed: as deep as SQLite goes


@pytest.mark.parametrize("cycles", [300, 3000], ids=["deep", "malformed"])
def test_a_search_index_left_too_deep_is_rebuilt_at_open(
    db_path: Path, cycles: int, caplog: pytest.LogCaptureFixture
) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off") as vault:
        for i in range(300):
            vault.retain(_note(i))
        before = _recall(vault, "walrus note 17")
    shard, _ = _levels(db_path)
    _deepen(db_path, shard, cycles=cycles)
    _, levels = _levels(db_path)
    assert levels is not None
    assert levels > schema.FTS_MAX_LEVELS
    if cycles == 3000:
        with closing(sqlite3.connect(db_path)) as conn, pytest.raises(sqlite3.DatabaseError):
            # "malformed", or the table cannot even be opened
            conn.execute(f"SELECT rowid FROM lines_fts_{shard} WHERE lines_fts_{shard} MATCH 'walrus'")
    with caplog.at_level(logging.WARNING, logger="memvault_sqlite"):
        vault = memvault.open("sqlite", path=str(db_path), scanner="off")
    try:
        assert f"rebuilt the search index of shard(s) {shard}" in caplog.text
        assert _recall(vault, "walrus note 17") == before
        assert _recall(vault, "scratch") == []
        table = f"lines_fts_{shard}"
        with closing(sqlite3.connect(db_path)) as conn:
            conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
        _, levels = _levels(db_path)
        assert levels is not None
        assert levels <= schema.FTS_MAX_LEVELS
    finally:
        vault.close()
