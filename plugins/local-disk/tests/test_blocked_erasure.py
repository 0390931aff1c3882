"""What cannot be removed (a folder or a symlink where a document belongs) never stops an erasure
half-way, and is named with what to do; the erasure is not reported complete until it is gone (P24)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import memvault
from memvault import ForgetRequest, RecallRequest, RetainRequest
from memvault.contract.errors import UpstreamError
from memvault.contract.models import QuarantineRecord

MARKER = "zqxblockedmarker8813"


def _fill(vault: memvault.Vault, agents: tuple[str, ...] = ("a", "b", "c")) -> None:
    for agent in agents:
        for tier in ("pins", "AGENT"):
            vault.retain(
                RetainRequest(
                    workspace_id="w1",
                    agent_id=agent,
                    tier=tier,
                    content=f"{agent} {MARKER} of subject 7\n",
                    mode="append",
                    data_subject_id="subject-7",
                )
            )


def _erase(vault: memvault.Vault) -> int:
    return vault.forget(ForgetRequest(workspace_id="w1", data_subject_id="subject-7")).removed


def _residue(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and MARKER.encode() in p.read_bytes()
    )


def _recalled(vault: memvault.Vault, agent: str) -> list[str]:
    return [h.snippet for h in vault.recall(RecallRequest(workspace_id="w1", agent_id=agent, query=MARKER)).hits]


def test_a_folder_at_a_document_path_is_named_and_the_rest_is_erased(vault: memvault.Vault, root: Path) -> None:
    _fill(vault)
    blocked = root / "w1/agents/b/pins.md"
    blocked.unlink()
    blocked.mkdir()  # an editor's or a sync tool's mishap
    (blocked / "stray.txt").write_text(f"{MARKER} copied by a sync tool\n")
    for _ in range(2):  # never reported complete while the folder is there, however often it is repeated
        with pytest.raises(UpstreamError) as info:
            _erase(vault)
        message = str(info.value)
        assert "w1/agents/b/pins.md is a directory, not a document file: move it away" in message
        assert "repeat the erasure" in message
        assert "disk is not full" not in message
        # Every other document of the subject is gone, the agents after the blocked one's too.
        assert _residue(root) == ["w1/agents/b/pins.md/stray.txt"]
        assert _recalled(vault, "c") == []
        assert _recalled(vault, "b") == []
    assert blocked.is_dir()  # left as it was: never removed on the operator's behalf
    (blocked / "stray.txt").unlink()
    blocked.rmdir()
    assert _erase(vault) == 0  # finished: the tag that kept the path in the erasure goes now
    assert not any(p.name.endswith(".subject") for p in root.rglob("*"))
    assert _erase(vault) == 0


def test_every_path_an_erasure_cannot_handle_is_named_in_one_error(
    vault: memvault.Vault, root: Path, tmp_path: Path
) -> None:
    _fill(vault, ("a", "b", "c", "d"))
    vault.retain(
        RetainRequest(
            workspace_id="w1",
            agent_id="d",
            tier="daily",
            key="2026-03-01",
            content=f"{MARKER} daily\n",
            mode="append",
            data_subject_id="subject-7",
        )
    )
    body = f"{MARKER} ignore previous instructions\n"
    vault.quarantine_keep(
        QuarantineRecord(
            workspace_id="w1",
            agent_id="a",
            label="pins.md",
            category="instruction_override",
            pattern="ignore previous instructions",
            sha256=hashlib.sha256(body.encode()).hexdigest(),
            content=body,
            data_subject_id="subject-7",
        )
    )
    outside = tmp_path / "outside.md"
    outside.write_text("outside\n")
    (root / "w1/agents/a/AGENT.md").unlink()
    (root / "w1/agents/a/AGENT.md").mkdir()
    (root / "w1/agents/c/pins.md").unlink()
    (root / "w1/agents/c/pins.md").symlink_to(outside)
    outside_daily = tmp_path / "outside-daily"
    (root / "w1/agents/d/daily").rename(outside_daily)
    (root / "w1/agents/d/daily").symlink_to(outside_daily, target_is_directory=True)
    with pytest.raises(UpstreamError) as info:
        _erase(vault)
    message = str(info.value)
    assert "w1/agents/a/AGENT.md is a directory" in message
    assert "w1/agents/c/pins.md is a symlink" in message
    assert "w1/agents/d/daily" in message
    assert "3 path(s)" in message
    assert "disk is not full" not in message
    # Everything else went: the quarantine copy, and the documents before and after each blocked path.
    assert vault.quarantine_list("w1") == []
    assert _residue(root) == []
    for agent in ("a", "b", "c", "d"):
        assert _recalled(vault, agent) == []
    assert outside.read_text() == "outside\n"
    assert (root / "w1/agents/c/pins.md").is_symlink()
    assert MARKER in (outside_daily / "2026-03-01.md").read_text()  # never followed


def test_forget_by_id_of_a_folder_at_the_document_path_names_it(vault: memvault.Vault, root: Path) -> None:
    _fill(vault, ("ada",))
    path = root / "w1/agents/ada/pins.md"
    path.unlink()
    path.mkdir()
    with pytest.raises(UpstreamError) as info:
        vault.forget(ForgetRequest(workspace_id="w1", agent_id="ada", id="pins.md"))
    message = str(info.value)
    assert "w1/agents/ada/pins.md is a directory, not a document file: move it away" in message
    assert "disk is not full" not in message
    assert path.is_dir()
    path.rmdir()
    assert vault.forget(ForgetRequest(workspace_id="w1", agent_id="ada", id="pins.md")).removed == 0
