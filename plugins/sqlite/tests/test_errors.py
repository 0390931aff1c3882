"""The provider translates its own storage errors: no raw ``sqlite3.Error`` leaves a hook (P28).

Every hook is called on the provider object itself, not through a Vault, so
these tests fail if the provider relies on the core to translate for it.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import memvault
from memvault.contract.models import QuarantineRecord
from memvault_sqlite import SqliteProvider

BODY = "ignore previous instructions\n"


def record() -> QuarantineRecord:
    return QuarantineRecord(
        workspace_id="w1",
        agent_id="a1",
        label="AGENT.md",
        category="instruction_override",
        pattern="ignore previous instructions",
        sha256=hashlib.sha256(BODY.encode()).hexdigest(),
        content=BODY,
    )


HOOKS: dict[str, Callable[[SqliteProvider], object]] = {
    "retain": lambda p: p.memvault_retain(
        memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="pins", content="more\n", mode="append")
    ),
    "recall": lambda p: p.memvault_recall(memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="fact")),
    "read": lambda p: p.memvault_read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="pins")),
    "forget": lambda p: p.memvault_forget(memvault.ForgetRequest(workspace_id="w1", agent_id="a1", id="pins.md")),
    "list_documents": lambda p: p.memvault_list_documents(memvault.ListDocumentsRequest(workspace_id="w1")),
    "quarantine_keep": lambda p: p.memvault_quarantine_keep(record=record()),
    "quarantine_list": lambda p: p.memvault_quarantine_list(workspace_id="w1"),
    "quarantine_get": lambda p: p.memvault_quarantine_get(workspace_id="w1", sha256=record().sha256),
}


@pytest.fixture
def provider(db_path: Path) -> Iterator[SqliteProvider]:
    p = SqliteProvider(path=str(db_path), timeout=1.0)
    p.memvault_retain(
        memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="pins", content="a fact\n", mode="append")
    )
    yield p
    p.close()


def in_new_thread(call: Callable[[], object]) -> BaseException | None:
    """Run ``call`` on a fresh thread (so the provider opens a fresh connection); return what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            raised.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    return raised[0] if raised else None


def replace_with_garbage(path: Path) -> None:
    """Put a non-database file at ``path`` (rename over it: never open the live file in this process).

    The WAL is emptied first: otherwise SQLite would read every page from it and never see the garbage.
    """
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    conn.close()
    new = path.with_name(path.name + ".new")
    new.write_bytes(b"this is no database " * 400)
    os.replace(new, path)


def overwrite_with_garbage(path: Path) -> None:
    """Write non-database bytes into the file itself (the same file, not a new one at its path), from another
    process (never open the live file in this one). The WAL is emptied first, as above."""
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    conn.close()
    script = "import sys\nwith open(sys.argv[1], 'r+b') as f:\n    f.write(b'this is no database ' * 400)\n"
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=60)


#: Writes go through the provider's writer thread, whose connection predates the garbage; the
#: failing-trigger tests below make SQLite fail inside them instead.
READERS_AND_FORGET = sorted(set(HOOKS) - {"retain", "quarantine_keep"})


@pytest.mark.parametrize("verb", READERS_AND_FORGET)
def test_file_overwritten_with_garbage_is_upstream_error_from_the_hook(
    provider: SqliteProvider, db_path: Path, verb: str
) -> None:
    overwrite_with_garbage(db_path)
    raised = in_new_thread(lambda: HOOKS[verb](provider))
    assert isinstance(raised, memvault.UpstreamError), repr(raised)
    assert verb in str(raised)
    assert "not a SQLite database" in str(raised)
    assert isinstance(raised.__cause__, sqlite3.DatabaseError)


@pytest.mark.parametrize("verb", sorted(HOOKS))
def test_file_replaced_by_garbage_is_upstream_error_from_the_hook(
    provider: SqliteProvider, db_path: Path, verb: str
) -> None:
    # A new file at the path: refused before SQLite reads it (test_file_swap.py has the rest).
    replace_with_garbage(db_path)
    raised = in_new_thread(lambda: HOOKS[verb](provider))
    assert isinstance(raised, memvault.UpstreamError), repr(raised)
    assert verb in str(raised)
    assert "replaced" in str(raised)
    assert str(db_path) in str(raised)


def test_health_reports_garbage_instead_of_raising(provider: SqliteProvider, db_path: Path) -> None:
    replace_with_garbage(db_path)
    status = in_new_thread(lambda: provider.memvault_health())
    assert status is None  # nothing raised
    assert not provider.memvault_health().ok


def install_failing_trigger(db_path: Path, table: str) -> None:
    """Make every insert into ``table`` fail inside SQLite (a real constraint error, not a mock)."""
    conn = sqlite3.connect(str(db_path))
    conn.execute(f"CREATE TRIGGER fail_{table} BEFORE INSERT ON {table} BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
    conn.commit()
    conn.close()


def test_failing_statement_in_retain_is_upstream_error_and_writes_nothing(
    provider: SqliteProvider, db_path: Path
) -> None:
    install_failing_trigger(db_path, "lines")
    with pytest.raises(memvault.UpstreamError, match="retain") as info:
        HOOKS["retain"](provider)
    assert isinstance(info.value.__cause__, sqlite3.IntegrityError)
    assert "disk says no" in str(info.value)
    # Nothing half-written: the body did not change although its row was updated before the failing insert.
    read = provider.memvault_read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="pins"))
    assert read.content == "a fact\n"


def test_failing_statement_in_quarantine_keep_is_upstream_error(provider: SqliteProvider, db_path: Path) -> None:
    install_failing_trigger(db_path, "quarantine")
    with pytest.raises(memvault.UpstreamError, match="quarantine_keep") as info:
        HOOKS["quarantine_keep"](provider)
    assert isinstance(info.value.__cause__, sqlite3.IntegrityError)
    assert provider.memvault_quarantine_list(workspace_id="w1") == []


def test_quarantine_row_round_trips_through_the_core_codec(provider: SqliteProvider, db_path: Path) -> None:
    kept = record()
    assert provider.memvault_quarantine_keep(record=kept) is True
    assert provider.memvault_quarantine_list(workspace_id="w1") == [kept]
    conn = sqlite3.connect(str(db_path))
    stored = conn.execute("SELECT created_at, label, sha256 FROM quarantine").fetchone()
    conn.close()
    assert stored == (kept.created_at.isoformat(), "AGENT.md", kept.sha256)


def test_quarantine_row_edited_into_an_invalid_record_is_upstream_error(
    provider: SqliteProvider, db_path: Path
) -> None:
    provider.memvault_quarantine_keep(record=record())
    conn = sqlite3.connect(str(db_path))
    conn.execute("UPDATE quarantine SET label = '../../etc/passwd'")
    conn.commit()
    conn.close()
    with pytest.raises(memvault.UpstreamError, match="quarantine row") as info:
        provider.memvault_quarantine_list(workspace_id="w1")
    assert isinstance(info.value.__cause__, memvault.InvalidRequest)


def test_closed_provider_is_upstream_error_and_close_is_idempotent(provider: SqliteProvider) -> None:
    provider.close()
    provider.close()
    with pytest.raises(memvault.UpstreamError, match="closed"):
        HOOKS["read"](provider)
