"""A database file replaced, moved away or deleted under a running vault (a restored backup moved over it).

SQLite's connections keep the old file open while the path names a new one, and the
``-wal`` and ``-shm`` beside the path belong to the old file: a connection opened on the
new file would read the old file's log as its own, and the old connections' last close
checkpoints and deletes whatever ``-wal``/``-shm`` the path has by then. So every verb
compares the file the path names with the one the vault opened before it uses a
connection and refuses with ``UpstreamError``; nothing reaches the new file, and the
restored file opens intact in a new vault.

The files of a database the vault has open are read from another process only (closing a
descriptor of it here would drop the vault's ``fcntl`` locks); a file the vault never
opened (the backup) is read here.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlite_helpers import wait_until

import memvault
from memvault_sqlite import SqliteProvider

RESTORED = 300


def peer(i: int, content: str, *, workspace: str = "w1") -> memvault.RetainRequest:
    return memvault.RetainRequest(
        workspace_id=workspace, agent_id="a1", tier="peers", key=f"peer-{i}", content=content, mode="append"
    )


def make_backup(path: Path, documents: int = RESTORED) -> None:
    """A memvault database holding ``documents`` documents, closed cleanly (no -wal beside it)."""
    with memvault.open("sqlite", path=str(path), scanner="off", idle_merge=0) as backup:
        backup.retain_many([peer(i, f"restored fact number {i}\n") for i in range(documents)])
    assert not Path(f"{path}-wal").exists()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def documents_in(path: Path, workspace: str = "w1") -> dict[str, str]:
    """Every document of ``workspace`` with its body, read by a new vault."""
    with memvault.open("sqlite", path=str(path), scanner="off") as fresh:
        listed = fresh.list_documents(memvault.ListDocumentsRequest(workspace_id=workspace)).documents
        return {
            doc.label: fresh.read(
                memvault.ReadRequest(workspace_id=workspace, agent_id="a1", tier="peers", key=doc.label[6:-3])
            ).content
            for doc in listed
        }


def integrity(path: Path) -> str:
    conn = sqlite3.connect(str(path))
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def backup(tmp_path: Path) -> Path:
    path = tmp_path / "backup.db"
    make_backup(path)
    return path


@pytest.fixture
def running(db_path: Path) -> Iterator[memvault.Vault]:
    """An open vault that has written 20 documents of its own (in workspace "live")."""
    vault = memvault.open("sqlite", path=str(db_path), scanner="off")
    for i in range(20):
        vault.retain(peer(i, f"live fact {i}\n", workspace="live"))
    yield vault
    vault.close()


def assert_refused(error: BaseException, path: Path) -> None:
    assert isinstance(error, memvault.UpstreamError), repr(error)
    message = str(error)
    assert str(path) in message
    assert "replaced" in message or "deleted" in message or "moved" in message
    assert "reopen" in message or "open it again" in message or "restart" in message


def retain_many(vault: memvault.Vault) -> None:
    """A write group of three retains: raise the error the first one got (retain_many answers each)."""
    outcomes = vault.retain_many([peer(i, "after the swap\n", workspace="live") for i in range(3)])
    raise next(o for o in outcomes if isinstance(o, BaseException))


VERBS: dict[str, Callable[[memvault.Vault], object]] = {
    "retain": lambda v: v.retain(peer(1, "after the swap\n", workspace="live")),
    "retain_many": retain_many,
    "recall": lambda v: v.recall(memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="restored fact")),
    "read": lambda v: v.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="peers", key="peer-1")),
    "forget": lambda v: v.forget(memvault.ForgetRequest(workspace_id="w1", agent_id="a1", id="peers/peer-1.md")),
    "forget_subject": lambda v: v.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id="s1")),
    "list_documents": lambda v: v.list_documents(memvault.ListDocumentsRequest(workspace_id="w1")),
    "quarantine_list": lambda v: v.quarantine_list("w1"),
    "quarantine_get": lambda v: v.quarantine_get("w1", "0" * 64),
}


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_refuses_after_a_backup_is_moved_over_the_file(
    running: memvault.Vault, db_path: Path, backup: Path, verb: str
) -> None:
    restored = digest(backup)
    os.replace(backup, db_path)
    with pytest.raises(memvault.MemvaultError) as info:
        VERBS[verb](running)
    assert_refused(info.value, db_path)
    assert not running.health().ok
    running.close()
    assert digest(db_path) == restored
    assert len(documents_in(db_path)) == RESTORED


def test_quarantine_keep_and_merge_refuse_after_a_swap(db_path: Path, backup: Path) -> None:
    provider = SqliteProvider(path=str(db_path), idle_merge=0)
    try:
        provider.memvault_retain(peer(0, "live fact\n", workspace="live"))
        restored = digest(backup)
        os.replace(backup, db_path)
        record = memvault.QuarantineRecord(
            workspace_id="w1",
            agent_id="a1",
            label="peers/peer-1.md",
            category="instruction_override",
            pattern="x",
            sha256=hashlib.sha256(b"x").hexdigest(),
            content="x",
        )
        for call in (lambda: provider.memvault_quarantine_keep(record=record), provider.merge_index):
            with pytest.raises(memvault.UpstreamError) as info:
                call()
            assert_refused(info.value, db_path)
    finally:
        provider.close()
    assert digest(db_path) == restored


def test_restored_backup_survives_acknowledged_writes_and_close(
    running: memvault.Vault, db_path: Path, backup: Path
) -> None:
    restored = digest(backup)
    os.replace(backup, db_path)
    acknowledged = 0
    for i in range(100):
        try:
            running.retain(peer(1000 + i, f"written after the swap {i}\n"))
            acknowledged += 1
        except memvault.UpstreamError as exc:
            assert_refused(exc, db_path)
    assert acknowledged == 0
    running.close()
    assert digest(db_path) == restored  # nothing reached the new file, not even at close
    assert integrity(db_path) == "ok"
    found = documents_in(db_path)
    assert len(found) == RESTORED
    assert found["peers/peer-7.md"] == "restored fact number 7\n"
    with memvault.open("sqlite", path=str(db_path), scanner="off") as reopened:  # the reopened vault works
        reopened.retain(peer(1000, "after reopening\n"))
        assert reopened.recall(memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="reopening")).hits


def test_one_document_backup_is_not_overwritten(running: memvault.Vault, db_path: Path, tmp_path: Path) -> None:
    small = tmp_path / "small.db"
    make_backup(small, documents=1)
    os.replace(small, db_path)
    with pytest.raises(memvault.UpstreamError):
        running.retain(peer(0, "overwrite attempt\n", workspace="w1"))
    running.close()
    assert documents_in(db_path) == {"peers/peer-0.md": "restored fact number 0\n"}


def test_close_right_after_the_swap_writes_nothing_into_the_new_file(
    running: memvault.Vault, db_path: Path, backup: Path
) -> None:
    # No verb runs between the swap and the close: close itself must notice. The old connections'
    # last close would otherwise checkpoint the old file's log and delete the -wal/-shm the path has.
    restored = digest(backup)
    os.replace(backup, db_path)
    running.close()
    assert digest(db_path) == restored
    assert len(documents_in(db_path)) == RESTORED


def test_the_stale_wal_beside_the_restored_file_is_not_read_as_its_log(
    running: memvault.Vault, db_path: Path, backup: Path
) -> None:
    # The old file's -wal (holding the live writes) stays at the path after the move: a new vault on
    # the restored file opened while the old one is still open must not read it as the new file's log.
    os.replace(backup, db_path)
    with pytest.raises(memvault.UpstreamError):
        running.read(memvault.ReadRequest(workspace_id="live", agent_id="a1", tier="peers", key="peer-1"))
    found = documents_in(db_path)
    assert len(found) == RESTORED
    assert documents_in(db_path, "live") == {}


BACKUP_WITH_WAL = textwrap.dedent(
    """
    import os, sqlite3, sys
    import memvault
    path = sys.argv[1]
    with memvault.open("sqlite", path=path, scanner="off", idle_merge=0) as v:
        v.retain_many([memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="peers", key=f"peer-{i}",
                                              content=f"restored fact number {i}\\n", mode="append")
                       for i in range(200)])
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    for i in range(200, 300):
        conn.execute("INSERT INTO probe DEFAULT VALUES")
        conn.commit()
    conn.close()
    # The last 100 documents, written by a vault that never checkpoints: they live in the -wal only.
    v = memvault.open("sqlite", path=path, scanner="off", idle_merge=0)
    v.provider.db.conn().execute("PRAGMA wal_autocheckpoint = 0")
    v.retain_many([memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="peers", key=f"peer-{i}",
                                          content=f"restored fact number {i}\\n", mode="append")
                   for i in range(200, 300)])
    sys.stdout.flush()
    os._exit(0)  # no close: no checkpoint, the -wal stays
    """
)


def test_a_backup_restored_with_its_own_wal_keeps_it(running: memvault.Vault, db_path: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"
    subprocess.run([sys.executable, "-c", BACKUP_WITH_WAL, str(copy)], check=True, timeout=120)
    wal = Path(f"{copy}-wal")
    assert wal.stat().st_size > 0
    Path(f"{copy}-shm").unlink()
    restored_wal = digest(wal)
    os.replace(copy, db_path)
    os.replace(wal, f"{db_path}-wal")
    with pytest.raises(memvault.UpstreamError):
        running.retain(peer(5, "after the swap\n"))
    running.close()
    assert digest(Path(f"{db_path}-wal")) == restored_wal  # the restored log is neither read nor deleted
    found = documents_in(db_path)
    assert len(found) == RESTORED
    assert found["peers/peer-250.md"] == "restored fact number 250\n"


def test_file_deleted_under_the_vault(running: memvault.Vault, db_path: Path) -> None:
    db_path.unlink()
    with pytest.raises(memvault.UpstreamError) as info:
        running.retain(peer(0, "after the delete\n"))
    assert_refused(info.value, db_path)
    assert "deleted" in str(info.value)
    running.close()
    assert not db_path.exists()  # never recreated through the old connections
    with memvault.open("sqlite", path=str(db_path), scanner="off") as fresh:  # a new vault starts afresh
        fresh.retain(peer(0, "new start\n"))
        assert fresh.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="peers", key="peer-0")).content


def test_file_moved_aside_keeps_every_acknowledged_write(running: memvault.Vault, db_path: Path) -> None:
    aside = db_path.with_name("aside.db")
    os.replace(db_path, aside)
    with pytest.raises(memvault.UpstreamError):
        running.retain(peer(99, "after the move\n", workspace="live"))
    running.close()
    assert integrity(aside) == "ok"
    assert len(documents_in(aside, "live")) == 20  # acknowledged before the move, none lost


def test_replaced_by_a_non_database_file(running: memvault.Vault, db_path: Path) -> None:
    other = db_path.with_name("notes.txt")
    other.write_bytes(b"not a database at all\n" * 100)
    before = digest(other)
    os.replace(other, db_path)
    with pytest.raises(memvault.UpstreamError) as info:
        running.recall(memvault.RecallRequest(workspace_id="live", agent_id="a1", query="fact"))
    assert_refused(info.value, db_path)
    running.close()
    assert digest(db_path) == before


def test_swap_during_a_write_group_commits_nothing(db_path: Path, backup: Path) -> None:
    restored = digest(backup)
    provider = SqliteProvider(path=str(db_path), idle_merge=0)

    def group() -> None:
        with provider.memvault_write_group():
            provider.memvault_retain(peer(0, "in the group\n", workspace="live"))
            os.replace(backup, db_path)
            provider.memvault_retain(peer(1, "in the group, after the swap\n", workspace="live"))

    try:
        with pytest.raises(memvault.UpstreamError) as info:
            group()
        assert_refused(info.value, db_path)
    finally:
        provider.close()
    assert digest(db_path) == restored


def test_background_merge_writes_nothing_into_the_new_file(db_path: Path, backup: Path) -> None:
    restored = digest(backup)
    provider = SqliteProvider(path=str(db_path), idle_merge=0.05)
    try:
        for i in range(40):  # many small writes: segments for the idle merge to merge
            provider.memvault_retain(peer(i % 4, f"segment maker {i}\n"))
        os.replace(backup, db_path)
        time.sleep(0.5)  # the merge thread's turn (it merges after 0.05 s without a write)
        assert digest(db_path) == restored
    finally:
        provider.close()
    assert digest(db_path) == restored


def test_pending_erasure_retries_write_nothing_into_the_new_file(db_path: Path, backup: Path) -> None:
    restored = digest(backup)
    provider = SqliteProvider(path=str(db_path), scrub_wait=0.0, idle_merge=0)
    reader = subprocess.Popen(  # holds a read transaction: the scrub must wait, the erasure stays pending
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute('BEGIN'); c.execute('SELECT count(*) FROM documents').fetchone()\n"
            "print('ready', flush=True); sys.stdin.readline()\n",
            str(db_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        provider.memvault_retain(peer(0, "to be erased\n"))
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "ready"
        forgotten = provider.memvault_forget(
            memvault.ForgetRequest(workspace_id="w1", agent_id="a1", id="peers/peer-0.md")
        )
        assert forgotten.pending
        os.replace(backup, db_path)
        assert reader.stdin is not None
        reader.stdin.write("\n")
        reader.stdin.flush()
        reader.wait(timeout=30)
        assert wait_until(lambda: digest(db_path) != restored, timeout=1.0) is False  # retries every 0.25 s
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait(timeout=30)
        provider.close()
    assert digest(db_path) == restored
    assert len(documents_in(db_path)) == RESTORED


SECOND_PROCESS = textwrap.dedent(
    """
    import sys
    import memvault
    v = memvault.open("sqlite", path=sys.argv[1], scanner="off")
    def pin(content):
        return memvault.RetainRequest(workspace_id="other", agent_id="a1", tier="pins", content=content, mode="append")
    v.retain(pin("x\\n"))
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        v.retain(pin("y\\n"))
        print("acknowledged", flush=True)
    except memvault.UpstreamError as exc:
        print("refused:", exc, flush=True)
    v.close()
    """
)


def test_a_second_process_with_the_file_open_refuses_too(running: memvault.Vault, db_path: Path, backup: Path) -> None:
    restored = digest(backup)
    other = subprocess.Popen(
        [sys.executable, "-c", SECOND_PROCESS, str(db_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None
        assert other.stdout.readline().strip() == "ready"
        os.replace(backup, db_path)
        with pytest.raises(memvault.UpstreamError):
            running.retain(peer(0, "here\n", workspace="live"))
        out, _ = other.communicate("\n", timeout=60)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(timeout=30)
    assert out.startswith("refused:"), out
    assert str(db_path) in out
    running.close()
    assert digest(db_path) == restored
    assert len(documents_in(db_path)) == RESTORED


def test_a_fork_after_the_swap_keeps_the_restored_wal(running: memvault.Vault, db_path: Path, tmp_path: Path) -> None:
    # Before a fork the process closes its idle connections (test_fork.py): closed the usual way, the
    # last one would delete the -wal the path has by then, the restored backup's own.
    copy = tmp_path / "copy.db"
    subprocess.run([sys.executable, "-c", BACKUP_WITH_WAL, str(copy)], check=True, timeout=120)
    wal = Path(f"{copy}-wal")
    Path(f"{copy}-shm").unlink()
    restored_wal = digest(wal)
    os.replace(copy, db_path)
    os.replace(wal, f"{db_path}-wal")
    pid = os.fork()
    if pid == 0:  # the child does nothing and leaves at once
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    assert digest(Path(f"{db_path}-wal")) == restored_wal
    with pytest.raises(memvault.UpstreamError):
        running.recall(memvault.RecallRequest(workspace_id="live", agent_id="a1", query="fact"))
    running.close()
    assert len(documents_in(db_path)) == RESTORED
