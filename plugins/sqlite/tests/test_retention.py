"""Memory over time on SQLite (P41-P45): schema 8, erasure-grade sweeps, idempotent writes across processes."""

from __future__ import annotations

import datetime as dt
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlite_helpers import raw_bytes, recall, retain

import memvault
from memvault.contract.clock import ManualClock, use_clock
from memvault_sqlite.schema import SCHEMA_VERSION

MARKER = "zqxsweptmarker5519"


@pytest.fixture
def clock() -> Iterator[ManualClock]:
    manual = ManualClock()
    with use_clock(manual):
        yield manual


def _expiring(vault: memvault.Vault, content: str, expires_at: dt.datetime, **kw: str) -> None:
    vault.retain(
        memvault.RetainRequest(
            workspace_id="w1", agent_id="a1", mode="append", content=content, expires_at=expires_at, **kw
        )
    )


def test_a_schema_7_file_gains_expiry_and_idempotency_keys(db_path: Path, clock: ManualClock) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off") as plain:
        retain(plain, "written before expiry existed\n", tier="pins")
    conn = sqlite3.connect(str(db_path))  # back to v7 as that release wrote it
    for index in ("documents_by_purge", "documents_expiring", "documents_by_write", "quarantine_by_expiry"):
        conn.execute(f"DROP INDEX {index}")
    conn.execute("ALTER TABLE documents DROP COLUMN expires_at")
    conn.execute("ALTER TABLE documents DROP COLUMN purge_at")
    conn.execute("ALTER TABLE quarantine DROP COLUMN expires_at")
    conn.execute("DROP TABLE idempotency_keys")
    conn.execute("DROP TABLE swept_shards")
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()
    with memvault.open("sqlite", path=str(db_path), scanner="off") as upgraded:
        assert [d.expires_at for d in upgraded.list_documents(memvault.ListDocumentsRequest()).documents] == [None]
        _expiring(upgraded, "goes in an hour\n", clock() + dt.timedelta(hours=1), tier="daily", key="2026-01-01")
        request = memvault.RetainRequest(
            workspace_id="w1", agent_id="a1", tier="AGENT", content="once\n", mode="append", idempotency_key="k-1"
        )
        assert upgraded.retain(request) == upgraded.retain(request)
        clock.advance(dt.timedelta(hours=2))
        assert upgraded.sweep_expired().documents[0].label == "daily/2026-01-01.md"
        assert upgraded.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="pins")).content == (
            "written before expiry existed\n"
        )
        assert upgraded.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="AGENT")).content == "once\n"
    conn = sqlite3.connect(str(db_path))
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
    finally:
        conn.close()


def test_a_sweep_leaves_no_byte_of_the_expired_text_in_db_wal_or_shm_p24_p43(
    vault: memvault.Vault, db_path: Path, clock: ManualClock
) -> None:
    for day in range(1, 8):  # enough other text that the index has several segments and pages
        retain(
            vault,
            "".join(f"ordinary note {day} {i} about gardens\n" for i in range(40)),
            tier="daily",
            key=f"2025-03-0{day}",
        )
    _expiring(vault, f"{MARKER} phone 555-0100\n", clock() + dt.timedelta(hours=1), tier="peers", key="bob")
    _expiring(vault, f"met {MARKER} at the cafe\n", clock() + dt.timedelta(hours=1), tier="pins")
    vault.embed_pending()
    assert MARKER.encode() in raw_bytes(db_path)
    clock.advance(dt.timedelta(hours=2))
    assert recall(vault, MARKER) == []  # absent from the moment it expires, before any sweep
    assert vault.health().retention_overdue == 2
    report = vault.sweep_expired()
    assert sorted(d.label for d in report.documents) == ["peers/bob.md", "pins.md"]
    assert MARKER.encode() not in raw_bytes(db_path)
    assert vault.health().retention_overdue == 0
    assert len(recall(vault, "gardens")) > 0


def test_an_append_to_an_expired_document_starts_afresh_and_the_next_sweep_scrubs_the_old_text_p41(
    vault: memvault.Vault, db_path: Path, clock: ManualClock
) -> None:
    _expiring(vault, f"{MARKER} old text\n", clock() + dt.timedelta(hours=1), tier="pins")
    clock.advance(dt.timedelta(hours=2))
    retain(vault, "new text\n", tier="pins")
    assert vault.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="pins")).content == "new text\n"
    assert recall(vault, MARKER) == []
    vault.sweep_expired()
    assert MARKER.encode() not in raw_bytes(db_path)


def test_concurrent_first_uses_of_a_key_in_several_processes_write_once_p44(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off") as first:
        retain(first, "start\n")
    script = textwrap.dedent(
        """
        import sys
        import memvault
        with memvault.open("sqlite", path=sys.argv[1], scanner="off", embedder="off") as vault:
            request = memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="AGENT",
                                             content="paid the invoice\\n", mode="append", idempotency_key="pay-1")
            results = {vault.retain(request) for _ in range(5)}
            assert len(results) == 1, results
            print(results.pop().bytes)
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(db_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    with memvault.open("sqlite", path=str(db_path), scanner="off") as after:
        body = after.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="AGENT")).content
    assert body == "start\npaid the invoice\n"
    assert set(outputs) == {str(len(body))}


def test_concurrent_first_uses_of_a_key_in_several_threads_write_once_p44(vault: memvault.Vault) -> None:
    request = memvault.RetainRequest(
        workspace_id="w1", agent_id="a1", tier="AGENT", content="once only\n", mode="append", idempotency_key="t-1"
    )
    results: list[memvault.RetainResult] = []
    start = threading.Barrier(8)

    def writer() -> None:
        start.wait()
        results.append(vault.retain(request))

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 8
    assert len(set(results)) == 1
    assert vault.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="AGENT")).content == "once only\n"


def test_a_recall_during_a_sweep_keeps_answering_p43(vault: memvault.Vault, clock: ManualClock) -> None:
    soon = clock() + dt.timedelta(hours=1)
    days = [(dt.date(2020, 1, 1) + dt.timedelta(days=day)).isoformat() for day in range(300)]
    results = vault.retain_many(
        [
            memvault.RetainRequest(
                workspace_id="w1",
                agent_id="a1",
                tier="daily",
                key=key,
                mode="append",
                content="".join(f"expiring line {i} of day {key}\n" for i in range(8)),
                expires_at=soon,
            )
            for key in days
        ]
    )
    assert all(isinstance(r, memvault.RetainResult) for r in results)
    retain(vault, "the walrus stays\n", tier="pins")
    clock.advance(dt.timedelta(hours=2))
    done = threading.Event()
    answers: list[list[str]] = []
    errors: list[BaseException] = []

    def recaller() -> None:
        while not done.is_set() and len(answers) < 10_000:
            try:
                answers.append([h.snippet for h in recall(vault, "walrus expiring")])
            except BaseException as exc:  # noqa: BLE001 - any failure fails the test below
                errors.append(exc)
                return

    thread = threading.Thread(target=recaller)
    thread.start()
    try:
        report = vault.sweep_expired()
    finally:
        done.set()
        thread.join(timeout=60)
    assert errors == []
    assert len(report.documents) == 300
    assert answers
    assert all(answer == ["the walrus stays"] for answer in answers)


def test_a_recall_subtracts_expired_documents_from_the_index_alone_p41(vault: memvault.Vault, db_path: Path) -> None:
    """The statistics' subtraction reads the covering index of expired documents, never their rows
    (with half a 10,000-line partition expired, reading the rows made a recall 3.3x slower)."""
    retain(vault, "a line\n", tier="pins")
    conn = sqlite3.connect(str(db_path))
    try:
        plan = " ".join(
            str(row[-1])
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT coalesce(sum(line_count), 0), coalesce(sum(term_count), 0) FROM documents"
                " INDEXED BY documents_expiring WHERE partition_id = ? AND purge_at IS NOT NULL AND purge_at <= ?"
                " AND tier IN (?, ?)",
                (1, "9999", "pins", "AGENT"),
            )
        )
    finally:
        conn.close()
    assert "COVERING INDEX documents_expiring" in plan, plan
