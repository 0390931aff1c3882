"""`memvault forget` and `memvault health` say when an erasure's scrub is pending (P24), end to end.

A reader process holds a read transaction on the sqlite store, so the forget
cannot truncate the write-ahead log: the command says the erasure is pending,
`memvault health` counts it, and once the reader is gone the same command
finishes it (and health says nothing is pending).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memvault.registry import get_registry, reset_registry

MEMVAULT = str(Path(sys.executable).with_name("memvault"))
MARKER = "zqxclipendingmarker"

HOLDER = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM documents").fetchone()
    print("holding", flush=True)
    sys.stdin.readline()
    conn.execute("COMMIT")
    conn.close()
    """
)


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    return subprocess.run(
        [MEMVAULT, "--provider", "sqlite", *args], cwd=cwd, capture_output=True, text=True, timeout=60, env=env
    )


def residue(db: Path) -> bool:
    files = [Path(f"{db}{suffix}") for suffix in ("", "-wal", "-shm")]
    return any(MARKER.encode() in f.read_bytes() for f in files if f.exists())


def test_cli_reports_a_pending_erasure_and_a_rerun_finishes_it(tmp_path: Path) -> None:
    reset_registry()
    if "sqlite" not in get_registry().names():
        pytest.skip("memvault-sqlite is not installed")
    (tmp_path / "memvault.toml").write_text('provider = "sqlite"\n[providers.sqlite]\nscrub_wait = 0.1\n')
    db = tmp_path / "memvault.db"
    stored = run(
        tmp_path, "retain", "--workspace", "w1", "--agent", "a1", "--tier", "peers", "--key", "bob",
        "--mode", "append", "--subject", "user-43", f"{MARKER} lives at 4 Elm Street",
    )  # fmt: skip
    assert stored.returncode == 0, stored.stderr
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline().strip() == "holding"
        forgot = run(tmp_path, "forget", "--workspace", "w1", "--subject", "user-43", "--json")
        assert forgot.returncode == 0, forgot.stderr
        assert json.loads(forgot.stdout) == {"removed": 1, "pending": True}
        text = run(tmp_path, "forget", "--workspace", "w1", "--subject", "user-43")
        assert "PENDING" in text.stdout
        health = run(tmp_path, "health", "--json")
        assert json.loads(health.stdout)["pending_erasures"] == 1
        assert "1 erasure(s) pending" in run(tmp_path, "health").stdout
        holder.stdin.write("release\n")
        holder.stdin.flush()
        assert holder.wait(60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(5)
    again = run(tmp_path, "forget", "--workspace", "w1", "--subject", "user-43", "--json")
    assert json.loads(again.stdout) == {"removed": 0}  # complete: "pending" is left out, as on the wire
    assert "pending_erasures" not in json.loads(run(tmp_path, "health", "--json").stdout)
    assert not residue(db)
