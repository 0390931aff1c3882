"""The search index's segments are merged in idle time (``idle_merge``), in steps that never deepen it.

Every retain commits a small FTS5 segment; a shard written line by line held 12-18 of
them and every query visited each. Once a shard has gone ``idle_merge`` seconds without
a write from the vault, a background thread merges it in short bounded steps.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest
from sqlite_helpers import raw_bytes, wait_until

import memvault
from memvault_sqlite import SqliteProvider, schema
from memvault_sqlite.merge import MERGE_MIN_SEGMENTS


def _line(i: int, agent: str = "a", key: str = "2025-03-01", text: str = "") -> memvault.RetainRequest:
    return memvault.RetainRequest(
        workspace_id="w",
        agent_id=agent,
        tier="daily",
        key=key,
        content=text or f"note {i} about the garden and walrus{i % 7}\n",
        mode="append",
    )


def _shape(db_path: Path, agent: str = "a") -> tuple[int, int]:
    """(levels, segments) of the shard holding ``agent``'s partition, read from another connection."""
    with closing(sqlite3.connect(db_path)) as conn:
        pid = conn.execute("SELECT id FROM partitions WHERE owner_id = ?", (agent,)).fetchone()[0]
        shape = schema.fts_shape(conn, pid % schema.FTS_SHARDS)
    assert shape is not None
    return shape


def _hits(vault: memvault.Vault, query: str, agent: str = "a") -> list[tuple[str, int, str, float]]:
    request = memvault.RecallRequest(workspace_id="w", agent_id=agent, query=query, limit=50)
    return [(h.source, h.line, h.snippet, h.score) for h in vault.recall(request).hits]


def test_a_shard_written_line_by_line_is_merged_once_the_vault_is_idle(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off", idle_merge=0.3) as vault:
        for i in range(300):
            vault.retain(_line(i))
        levels, segments = _shape(db_path)
        assert segments >= 8  # what FTS5's own automerge leaves
        before = [_hits(vault, q) for q in ("walrus3", "garden note", "note 17", "about walrus5 garden")]
        assert wait_until(lambda: _shape(db_path)[1] < MERGE_MIN_SEGMENTS)
        # The same terms in fewer segments: every recall answers exactly as before.
        assert [_hits(vault, q) for q in ("walrus3", "garden note", "note 17", "about walrus5 garden")] == before
        assert _shape(db_path)[0] <= levels + 1
        vault.retain(_line(300))  # and writes go on
        assert _hits(vault, "note 300")[0][2] == "note 300 about the garden and walrus6"
    with closing(sqlite3.connect(db_path)) as conn:
        shard = conn.execute("SELECT id FROM partitions").fetchone()[0] % schema.FTS_SHARDS
        conn.execute(f"INSERT INTO lines_fts_{shard} (lines_fts_{shard}) VALUES ('integrity-check')")


def test_idle_merge_zero_leaves_the_segments_as_automerge_left_them(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off", idle_merge=0) as vault:
        for i in range(300):
            vault.retain(_line(i))
        segments = _shape(db_path)[1]
        time.sleep(0.5)
        assert _shape(db_path)[1] == segments >= 8
        assert not [t for t in threading.enumerate() if t.name.startswith("memvault-sqlite-merge")]


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf")])
def test_a_negative_or_non_finite_idle_merge_is_refused_saying_what_it_takes(db_path: Path, value: float) -> None:
    """Built directly (no registry in between): nan passed a `< 0` check, and inf is no idle time."""
    with pytest.raises(memvault.InvalidRequest, match="idle_merge must be zero .* or a positive, finite number"):
        SqliteProvider(path=str(db_path), idle_merge=value)


def test_no_merge_runs_while_writes_keep_coming(db_path: Path) -> None:
    """Merging waits for `idle_merge` seconds without a write: a steady writer is never slowed by it."""
    with memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off", idle_merge=0.5) as vault:
        deadline = time.monotonic() + 1.5
        i = 0
        peak = 0
        while time.monotonic() < deadline:
            vault.retain(_line(i))
            i += 1
            peak = max(peak, _shape(db_path)[1])
            time.sleep(0.01)
        assert _shape(db_path)[1] >= MERGE_MIN_SEGMENTS or peak >= MERGE_MIN_SEGMENTS
        with closing(sqlite3.connect(db_path)) as conn:
            usermerge = conn.execute(
                "SELECT v FROM lines_fts_{}_config WHERE k = 'usermerge'".format(
                    conn.execute("SELECT id FROM partitions").fetchone()[0] % schema.FTS_SHARDS
                )
            ).fetchone()
        assert usermerge is None  # not one merge step ran (the first sets usermerge)
        assert wait_until(lambda: _shape(db_path)[1] < MERGE_MIN_SEGMENTS)


def test_many_idle_merges_never_deepen_the_index(db_path: Path) -> None:
    """A merge of the whole index ('optimize', a negative 'merge') adds a level or two each time new
    writes sit below it, and SQLite gives up past 2,000 levels; the idle merge keeps one segment per
    level instead, so a cycle of writes and merges leaves the index as shallow as its size needs."""
    with memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off", idle_merge=0.01) as vault:
        for cycle in range(60):
            for i in range(8):
                vault.retain(_line(cycle * 8 + i, key=f"2025-03-{1 + cycle % 28:02d}"))
            assert wait_until(lambda: _shape(db_path)[1] < MERGE_MIN_SEGMENTS)
        levels, _ = _shape(db_path)
        assert levels <= 8
        assert _hits(vault, "walrus3 note 475")[0][2] == "note 475 about the garden and walrus6"


def test_erasure_after_idle_merges_leaves_no_bytes(db_path: Path) -> None:
    """Merged segments are copies of the index: the erasure still rewrites the shard and the pages
    the copies held are zeroed, so the erased text is nowhere in the files (P24)."""
    marker = "zqxmergemarker5521"
    with memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off", idle_merge=0.05) as vault:
        for i in range(60):
            vault.retain(_line(i))
        vault.retain(_line(0, key="2025-03-02", text=f"{marker} lives at 4 Elm Street\n"))
        vault.retain(
            memvault.RetainRequest(
                workspace_id="w",
                agent_id="a",
                tier="peers",
                key="bob",
                content=f"{marker} phone\n",
                mode="append",
                data_subject_id="s1",
            )
        )
        for i in range(60, 120):
            vault.retain(_line(i))
        assert wait_until(lambda: _shape(db_path)[1] < MERGE_MIN_SEGMENTS)
        assert marker.encode() in raw_bytes(db_path)
        vault.forget(memvault.ForgetRequest(workspace_id="w", agent_id="a", id="daily/2025-03-02.md"))
        vault.forget(memvault.ForgetRequest(workspace_id="w", data_subject_id="s1"))
        for i in range(120, 200):  # more writes and merges after the erasure
            vault.retain(_line(i))
        assert wait_until(lambda: _shape(db_path)[1] < MERGE_MIN_SEGMENTS)
        assert _hits(vault, marker) == []
    assert marker.encode() not in raw_bytes(db_path)


def test_closing_right_after_writes_stops_the_merge_thread(db_path: Path) -> None:
    vault = memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off", idle_merge=0.05)
    for i in range(200):
        vault.retain(_line(i))
    before = _hits(vault, "garden walrus2")
    started = time.monotonic()
    vault.close()
    assert time.monotonic() - started < 3.0
    assert wait_until(lambda: not [t for t in threading.enumerate() if t.name.startswith("memvault-sqlite-merge")], 3.0)
    with memvault.open("sqlite", path=str(db_path), scanner="off") as again:
        assert _hits(again, "garden walrus2") == before


def test_another_process_holding_the_write_lock_only_delays_the_merge(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off", idle_merge=0.05) as vault:
        for i in range(300):
            vault.retain(_line(i))
        with closing(sqlite3.connect(db_path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # as another process's writer would
            time.sleep(0.5)
            assert _shape(db_path)[1] >= MERGE_MIN_SEGMENTS
            other.execute("ROLLBACK")
        assert wait_until(lambda: _shape(db_path)[1] < MERGE_MIN_SEGMENTS)


def test_merge_index_merges_every_shard_now_and_then_has_nothing_to_do(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off", idle_merge=0) as vault:
        for i in range(300):
            vault.retain(_line(i, agent=f"a{i % 3}"))  # three partitions, three shards
        assert all(_shape(db_path, f"a{k}")[1] >= MERGE_MIN_SEGMENTS for k in range(3))
        before = _hits(vault, "walrus3 garden", "a1")
        assert before
        provider = vault.provider
        assert provider.merge_index() >= 3
        assert all(_shape(db_path, f"a{k}")[1] < MERGE_MIN_SEGMENTS for k in range(3))
        assert provider.merge_index() == 0
        assert _hits(vault, "walrus3 garden", "a1") == before


def test_merge_index_of_an_in_memory_database_does_nothing() -> None:
    with memvault.open("sqlite", path=":memory:", scanner="off") as vault:
        for i in range(50):
            vault.retain(_line(i))
        assert vault.provider.merge_index() == 0
        assert _hits(vault, "note 7")[0][2] == "note 7 about the garden and walrus0"


def test_a_quiet_shard_is_merged_while_another_keeps_being_written(db_path: Path) -> None:
    """Idle is per shard: a service whose tenants never all pause still gets its quiet shards merged."""
    with memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off", idle_merge=0.2) as vault:
        for i in range(300):
            vault.retain(_line(i, agent="quiet"))
        assert _shape(db_path, "quiet")[1] >= MERGE_MIN_SEGMENTS
        deadline = time.monotonic() + 5.0
        merged = False
        i = 0
        while not merged and time.monotonic() < deadline:
            vault.retain(_line(i, agent="busy"))
            i += 1
            time.sleep(0.005)
            merged = _shape(db_path, "quiet")[1] < MERGE_MIN_SEGMENTS
        assert merged
        assert i >= 20  # the other shard was being written all along
        assert _hits(vault, "note 299", "quiet")[0][2] == "note 299 about the garden and walrus5"


def test_one_merging_thread_serves_every_idle_spell(db_path: Path) -> None:
    """A writer after an idle spell only wakes the thread: starting a thread took 0.3-0.4 ms of its retain."""
    with memvault.open("sqlite", path=str(db_path), scanner="off", synchronous="off", idle_merge=0.05) as vault:
        seen = set()
        for spell in range(3):
            for i in range(100):
                vault.retain(_line(spell * 100 + i))
            assert wait_until(lambda: _shape(db_path)[1] < MERGE_MIN_SEGMENTS)
            time.sleep(0.1)
            seen |= {t.ident for t in threading.enumerate() if t.name.startswith("memvault-sqlite-merge")}
        assert len(seen) == 1


def test_merge_index_on_a_closed_vault_says_it_is_closed(db_path: Path) -> None:
    vault = memvault.open("sqlite", path=str(db_path), scanner="off")
    vault.close()
    with pytest.raises(memvault.UpstreamError, match="is closed: open a new vault"):
        vault.provider.merge_index()
