"""Small helpers shared by the sqlite plugin's tests."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import memvault


def retain(vault: memvault.Vault, content: str, *, tier: str = "AGENT", mode: str = "append", **kw: str) -> None:
    kw.setdefault("workspace_id", "w1")
    if tier != "CREW":
        kw.setdefault("agent_id", "a1")
    vault.retain(memvault.RetainRequest(tier=tier, content=content, mode=mode, **kw))


def recall(vault: memvault.Vault, query: str, **kw: object) -> list[memvault.RecallSnippet]:
    kw.setdefault("workspace_id", "w1")
    kw.setdefault("agent_id", "a1")
    return vault.recall(memvault.RecallRequest(query=query, **kw)).hits  # type: ignore[arg-type]


def raw_bytes(db_path: Path) -> bytes:
    """The bytes of the database, -wal and -shm files, read by another process.

    Never open these files from a process that has the database open: closing
    that descriptor would drop the fcntl locks of its SQLite connections.
    """
    script = (
        "import sys, pathlib\n"
        "for s in ('', '-wal', '-shm'):\n"
        "    p = pathlib.Path(sys.argv[1] + s)\n"
        "    sys.stdout.buffer.write(p.read_bytes() if p.exists() else b'')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script, str(db_path)], capture_output=True, check=True, timeout=60
    ).stdout


def poison_lines(db_path: Path) -> None:
    """A trigger that fails the insert of any line holding "poison": a statement failing mid-write."""
    conn = sqlite3.connect(str(db_path))
    conn.execute(
        "CREATE TRIGGER poison BEFORE INSERT ON lines WHEN NEW.text LIKE '%poison%'"
        " BEGIN SELECT RAISE(ABORT, 'poisoned line'); END"
    )
    conn.commit()
    conn.close()


def wait_until(predicate: Callable[[], object], timeout: float = 20.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true (then ``True``) or ``timeout`` seconds have passed (``False``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
