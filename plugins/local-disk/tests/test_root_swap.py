"""The root folder replaced under a running vault (a restored backup tree moved over it), #33.

local-disk opens the root by its path on every call and keeps no descriptor, lock or cached
document past one (the document cache is keyed by each file's identity and change time), so
after the swap every call works on the tree the path names now: the restored documents read
as they were backed up, later writes land in them, and nothing reaches the tree moved aside.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import memvault

RESTORED = 300


def peer(i: int, content: str, *, workspace: str = "w1") -> memvault.RetainRequest:
    return memvault.RetainRequest(
        workspace_id=workspace, agent_id="a1", tier="peers", key=f"peer-{i}", content=content, mode="append"
    )


def read(vault: memvault.Vault, i: int) -> str:
    return vault.read(memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="peers", key=f"peer-{i}")).content


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (lock sentinels aside) with the sha256 of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def test_a_backup_tree_moved_over_the_root_is_read_and_extended_intact(tmp_path: Path) -> None:
    root, backup, aside = tmp_path / "memory", tmp_path / "backup", tmp_path / "memory.old"
    with memvault.open("local-disk", root=str(backup), scanner="off") as saved:
        saved.retain_many([peer(i, f"restored fact number {i}\n") for i in range(RESTORED)])
    with memvault.open("local-disk", root=str(root), scanner="off") as running:
        for i in range(20):
            running.retain(peer(i, f"live fact {i} zebra\n"))
        assert read(running, 7) == "live fact 7 zebra\n"  # cached now
        os.replace(root, aside)
        os.replace(backup, root)
        before = snapshot(aside)

        assert read(running, 7) == "restored fact number 7\n"
        hits = running.recall(memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="zebra")).hits
        assert hits == []
        for i in range(100):
            running.retain(peer(i, f"after the restore {i}\n"))
        assert snapshot(aside) == before  # nothing reached the tree moved aside

    with memvault.open("local-disk", root=str(root), scanner="off") as fresh:
        listed = fresh.list_documents(memvault.ListDocumentsRequest(workspace_id="w1")).documents
        assert len(listed) == RESTORED
        assert read(fresh, 7) == "restored fact number 7\nafter the restore 7\n"
        assert read(fresh, 200) == "restored fact number 200\n"
