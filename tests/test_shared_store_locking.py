"""Several vaults on one store in one process, while other processes write: no lock is ever lost.

On POSIX, closing *any* descriptor of a file drops every ``fcntl`` lock the
process holds on it, including the locks of SQLite connections already open in
that process (SQLite's "How To Corrupt An SQLite Database File", section 2.2).
A provider that opens its own files outside its locking layer (to sniff a
header, to probe health) silently unlocks the store for its neighbours: the
last writer process then believes it is alone, checkpoints and deletes the
``-wal``/``-shm`` files under the feet of the first process, whose next vault
finds a "malformed" database.

The sequence (contract P11, P12, P28): process A opens a vault on the store and
keeps it, opens a second vault on the same store, checks health on both, then
four writer processes append concurrently and exit; A opens a third vault and
every vault of A still reads, writes and recalls, nothing is lost, and for
sqlite ``PRAGMA integrity_check`` says ``ok``. Every step is bounded in time.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from memvault.registry import get_registry, reset_registry

WRITERS = 4
APPENDS = 25
STEP_TIMEOUT = 60.0

HOLDER = textwrap.dedent(
    """
    import json, sys
    import memvault

    name, settings = sys.argv[1], json.loads(sys.argv[2])

    def retain(vault, text):
        vault.retain(memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="pins", content=text, mode="append"))

    def lines(vault):
        return vault.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="pins")).content.splitlines()

    first = memvault.open(name, scanner="off", **settings)
    retain(first, "holder first\\n")
    second = memvault.open(name, scanner="off", **settings)
    retain(second, "holder second\\n")
    healthy = [first.health().ok, second.health().ok]
    print("ready", flush=True)
    sys.stdin.readline()  # the writers ran and exited
    third = memvault.open(name, scanner="off", **settings)
    for n, vault in enumerate((first, second, third)):
        retain(vault, f"holder after {n}\\n")
    hits = [len(v.recall(memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="writer")).hits)
            for v in (first, second, third)]
    healthy += [v.health().ok for v in (first, second, third)]
    print(json.dumps({"lines": [lines(v) for v in (first, second, third)], "hits": hits, "healthy": healthy}))
    for vault in (first, second, third):
        vault.close()
    """
)

WRITER = textwrap.dedent(
    """
    import json, sys
    import memvault

    name, settings, me, count = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    with memvault.open(name, scanner="off", **settings) as vault:
        for i in range(count):
            vault.retain(memvault.RetainRequest(
                workspace_id="w1", agent_id="a1", tier="pins", content=f"writer {me} line {i}\\n", mode="append"))
    """
)


def _settings(name: str, tmp_path: Path) -> dict[str, Any]:
    reset_registry()
    registry = get_registry()
    if name not in registry.names():
        pytest.skip(f"provider {name!r} is not installed (pip install ./plugins/{name})")
    info = registry.get(name)
    assert info.scratch is not None
    return dict(info.scratch(tmp_path))


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}


@pytest.mark.parametrize("name", ["sqlite", "local-disk"])
def test_second_and_third_vault_on_one_store_keep_the_first_vaults_locks(name: str, tmp_path: Path) -> None:
    settings = _settings(name, tmp_path)
    args = [name, json.dumps(settings)]
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        ready = holder.stdout.readline()
        assert ready.strip() == "ready", holder.stderr.read() if holder.stderr else ""
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, *args, str(n), str(APPENDS)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env(),
            )
            for n in range(WRITERS)
        ]
        for writer in writers:
            _, err = writer.communicate(timeout=STEP_TIMEOUT)
            assert writer.returncode == 0, err
        out, err = holder.communicate("go\n", timeout=STEP_TIMEOUT)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(5)
    assert holder.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    expected = {"holder first", "holder second", *(f"holder after {n}" for n in range(3))}
    expected |= {f"writer {w} line {i}" for w in range(WRITERS) for i in range(APPENDS)}
    for lines in result["lines"]:
        assert len(lines) == len(expected)
        assert set(lines) == expected
    assert all(hits > 0 for hits in result["hits"])
    assert all(result["healthy"])
    if name == "sqlite":
        conn = sqlite3.connect(settings["path"])
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()
