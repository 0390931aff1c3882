"""Threads and processes share one database without losing writes or leaking "database is locked" (P12, P20, P28)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from sqlite_helpers import recall, retain

import memvault

WORKER = """
import sys, memvault
path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with memvault.open("sqlite", path=path, scanner="off") as vault:
    for i in range(n):
        vault.retain(memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="pins",
                                            content=f"{name} entry {i} done\\n", mode="append"))
print("ok")
"""


def entries(vault: memvault.Vault) -> list[str]:
    body = vault.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="pins")).content
    return body.splitlines()


def test_concurrent_thread_appends_lose_nothing_and_stay_whole_p12(vault: memvault.Vault) -> None:
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(20):
                retain(vault, f"thread{t} entry {i} done\n", tier="pins")
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    lines = entries(vault)
    assert sorted(lines) == sorted(f"thread{t} entry {i} done" for t in range(6) for i in range(20))
    assert len(recall(vault, "thread3 entry", limit=20)) == 20


def test_concurrent_process_appends_lose_nothing_p12(vault: memvault.Vault, db_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(db_path), f"proc{p}", "15"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(3)
    ]
    # This process writes at the same time.
    for i in range(15):
        retain(vault, f"main entry {i} done\n", tier="pins")
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err for _out, err in outputs]
    names = ["main", "proc0", "proc1", "proc2"]
    assert sorted(entries(vault)) == sorted(f"{n} entry {i} done" for n in names for i in range(15))


def test_retain_in_one_process_is_seen_by_recall_in_another_p20(vault: memvault.Vault, db_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(db_path), "remote", "1"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert [h.snippet for h in recall(vault, "remote entry")] == ["remote entry 0 done"]


def test_lock_held_past_timeout_is_upstream_error_not_sqlite_error(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off", timeout=0.3) as vault:
        blocker = sqlite3.connect(str(db_path), isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(memvault.UpstreamError, match="locked") as info:
                retain(vault, "blocked\n", tier="pins")
            assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        retain(vault, "unblocked\n", tier="pins")
        assert entries(vault) == ["unblocked"]


def test_short_lock_is_waited_out_not_reported(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off", timeout=5) as vault:
        blocker = sqlite3.connect(str(db_path), isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")
        timer = threading.Timer(0.3, lambda: blocker.execute("ROLLBACK"))
        timer.start()
        retain(vault, "after wait\n", tier="pins")
        timer.join()
        blocker.close()
        assert entries(vault) == ["after wait"]


def open_handles(db_path: Path) -> int:
    """File descriptors of this process open on the database file."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}") == str(db_path):
                count += 1
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to count open files")
def test_connections_of_finished_threads_are_released(vault: memvault.Vault, db_path: Path) -> None:
    def once() -> None:
        recall(vault, "anything")

    for _ in range(20):
        t = threading.Thread(target=once)
        t.start()
        t.join()
    assert open_handles(db_path) <= 3


def test_processes_creating_the_same_new_database_at_once_all_succeed(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(path), f"opener{p}", "3"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(4)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err for _out, err in outputs]
    with memvault.open("sqlite", path=str(path), scanner="off") as vault:
        assert len(entries(vault)) == 12
