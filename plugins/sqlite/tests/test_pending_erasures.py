"""An erasure is never reported complete while its text may still be on disk (P24).

A reader holding a read transaction keeps SQLite's write-ahead log busy, so the
checkpoint that scrubs erased text from the ``-wal`` file cannot truncate it.
The forget then says ``pending=True``, the database keeps a durable record,
health counts it, and the scrub finishes at the next opportunity: a retry of
the forget, the next write, a background retry, or the next open (also after
the process was killed between deleting the rows and scrubbing).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlite_helpers import raw_bytes, recall, retain, wait_until

import memvault

MARKER = "zqxpendingmarker9043"
SUBJECT = "user-43"
DEADLINE = 20.0


@contextmanager
def held_reader(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A connection inside a read transaction (an operator's sqlite3 shell, a backup, a slow recall)."""
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM documents").fetchone()
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
        conn.close()


@pytest.fixture
def quick(db_path: Path) -> Iterator[memvault.Vault]:
    with memvault.open("sqlite", path=str(db_path), scanner="off", timeout=1, scrub_wait=0.2) as v:
        yield v


def forget_subject(vault: memvault.Vault) -> memvault.ForgetResult:
    return vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id=SUBJECT))


def put_marker(vault: memvault.Vault) -> None:
    retain(vault, "".join(f"ordinary line {i} about gardens\n" for i in range(50)), tier="pins")
    retain(vault, f"{MARKER} lives at 4 Elm Street\n", tier="peers", key="bob", data_subject_id=SUBJECT)


def test_erasure_blocked_by_a_reader_is_reported_pending_not_complete(quick: memvault.Vault, db_path: Path) -> None:
    put_marker(quick)
    with held_reader(db_path):
        result = forget_subject(quick)
        assert (result.removed, result.pending) == (1, True)
        assert quick.health().pending_erasures == 1
        # Removed from every verb's view at once, even while the bytes wait.
        assert recall(quick, MARKER) == []
        assert quick.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="peers", key="bob")).content == ""


def test_retry_of_a_pending_erasure_finishes_it(quick: memvault.Vault, db_path: Path) -> None:
    put_marker(quick)
    with held_reader(db_path):
        assert forget_subject(quick).pending
        retry = forget_subject(quick)
        assert (retry.removed, retry.pending) == (0, True)  # still blocked: still honest
    retry = forget_subject(quick)
    assert (retry.removed, retry.pending) == (0, False)
    assert MARKER.encode() not in raw_bytes(db_path)
    assert quick.health().pending_erasures == 0


def test_retry_of_a_pending_forget_by_id_finishes_it(quick: memvault.Vault, db_path: Path) -> None:
    put_marker(quick)
    request = memvault.ForgetRequest(workspace_id="w1", agent_id="a1", id="peers/bob.md")
    with held_reader(db_path):
        assert quick.forget(request) == memvault.ForgetResult(removed=1, pending=True)
    assert quick.forget(request) == memvault.ForgetResult(removed=0, pending=False)
    assert MARKER.encode() not in raw_bytes(db_path)


def test_pending_erasure_finishes_without_a_retry_once_readers_leave(quick: memvault.Vault, db_path: Path) -> None:
    put_marker(quick)
    with held_reader(db_path):
        assert forget_subject(quick).pending
    assert wait_until(lambda: quick.health().pending_erasures == 0, DEADLINE)
    assert MARKER.encode() not in raw_bytes(db_path)


def test_next_write_finishes_a_pending_erasure_of_another_process(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off", scrub_wait=0.1) as first:
        put_marker(first)
        with held_reader(db_path):
            assert forget_subject(first).pending
            first.close()  # its background retry stops with it
        with memvault.open("sqlite", path=str(db_path), scanner="off") as second:
            # Opening already finishes it (the reader is gone); a write would too.
            retain(second, "later note\n", tier="pins")
            assert second.health().pending_erasures == 0
    assert MARKER.encode() not in raw_bytes(db_path)


def test_forget_of_something_else_never_reports_another_erasures_pending_state(
    quick: memvault.Vault, db_path: Path
) -> None:
    put_marker(quick)
    retain(quick, "unrelated\n", tier="pins", workspace_id="w2")
    with held_reader(db_path):
        assert forget_subject(quick).pending
        other = quick.forget(memvault.ForgetRequest(workspace_id="w2", agent_id="a1", id="AGENT.md"))
        assert (other.removed, other.pending) == (0, False)


KILLED_WRITER = textwrap.dedent(
    """
    import json, os, sys
    import memvault

    path = sys.argv[1]
    vault = memvault.open("sqlite", path=path, scanner="off", scrub_wait=0.1)
    result = vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id=sys.argv[2]))
    print(json.dumps({"removed": result.removed, "pending": result.pending}), flush=True)
    os.kill(os.getpid(), 9)  # killed between deleting the rows and scrubbing the bytes
    """
)


def test_erasure_interrupted_by_a_kill_finishes_at_the_next_open(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off") as vault:
        put_marker(vault)
    with held_reader(db_path) as reader:
        proc = subprocess.run(
            [sys.executable, "-c", KILLED_WRITER, str(db_path), SUBJECT], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == -9, proc.stderr
        assert json.loads(proc.stdout) == {"removed": 1, "pending": True}
        assert MARKER.encode() in raw_bytes(db_path)  # honest: the text is still in the WAL
        reader.execute("COMMIT")
        reader.execute("BEGIN")  # this connection stays open, so SQLite cannot clean up on its own
        reader.execute("COMMIT")
        with memvault.open("sqlite", path=str(db_path), scanner="off") as vault:
            assert vault.health().pending_erasures == 0
            assert MARKER.encode() not in raw_bytes(db_path)
            assert recall(vault, "gardens")
