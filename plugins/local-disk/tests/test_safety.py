"""Symlinks, escaping identifiers, undecodable files and health of the local-disk provider."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import memvault
from memvault import ForgetRequest, ReadRequest, RecallRequest, RetainRequest
from memvault.contract.errors import InvalidRequest, UpstreamError


def _agent_retain(vault: memvault.Vault, content: str, tier: str = "AGENT", **kw: str) -> memvault.RetainResult:
    return vault.retain(
        RetainRequest(workspace_id="w1", agent_id="ada", tier=tier, content=content, mode="append", **kw)
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("workspace_id", "../escape"),
        ("workspace_id", ".hidden"),
        ("agent_id", ".."),
        ("agent_id", "a/b"),
        ("agent_id", "a\\b"),
        ("agent_id", "nul\x00byte"),
        ("key", "../../etc"),
        ("key", ".hidden"),
    ],
)
def test_escaping_or_hidden_names_are_refused_before_touching_disk(
    vault: memvault.Vault, root: Path, field: str, value: str
) -> None:
    """P3/P7: InvalidRequest at construction; the root is never even created."""
    args = {"workspace_id": "w1", "agent_id": "ada", "tier": "peers", "key": "bob", "content": "x", "mode": "append"}
    args[field] = value
    with pytest.raises(InvalidRequest):
        vault.retain(RetainRequest(**args))
    assert not root.exists()
    assert not (root.parent / "escape").exists()


def test_forget_with_a_path_shaped_id_is_refused_before_touching_disk(vault: memvault.Vault, root: Path) -> None:
    with pytest.raises(InvalidRequest):
        vault.forget(ForgetRequest(workspace_id="w1", agent_id="ada", id="../AGENT.md"))
    assert not root.exists()


def test_symlinked_document_is_refused_and_its_target_untouched(
    vault: memvault.Vault, root: Path, tmp_path: Path
) -> None:
    _agent_retain(vault, "mine\n")
    target = tmp_path / "outside.md"
    target.write_text("outside\n")
    link = root / "w1/agents/ada/pins.md"
    link.symlink_to(target)
    with pytest.raises(UpstreamError, match="symlink"):
        _agent_retain(vault, "more\n", tier="pins")
    with pytest.raises(UpstreamError, match="symlink"):
        vault.read(ReadRequest(workspace_id="w1", agent_id="ada", tier="pins"))
    with pytest.raises(UpstreamError, match="symlink"):
        vault.forget(ForgetRequest(workspace_id="w1", agent_id="ada", id="pins.md"))
    assert target.read_text() == "outside\n"
    assert link.is_symlink()


def test_replace_over_a_symlinked_document_is_refused(vault: memvault.Vault, root: Path, tmp_path: Path) -> None:
    _agent_retain(vault, "mine\n")
    target = tmp_path / "outside.md"
    target.write_text("outside\n")
    link = root / "w1/agents/ada/PERSONA.md"
    link.symlink_to(target)
    with pytest.raises(UpstreamError, match="symlink"):
        vault.retain(RetainRequest(workspace_id="w1", agent_id="ada", tier="PERSONA", content="x", mode="replace"))
    assert link.is_symlink()
    assert target.read_text() == "outside\n"


def test_symlinked_folder_is_refused_and_nothing_is_written_through_it(
    vault: memvault.Vault, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "w1/agents").mkdir(parents=True)
    (root / "w1/agents/ada").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UpstreamError, match="symlink"):
        _agent_retain(vault, "x\n")
    with pytest.raises(UpstreamError, match="symlink"):
        vault.recall(RecallRequest(workspace_id="w1", agent_id="ada", query="x"))
    assert list(outside.iterdir()) == []


def test_symlinked_document_is_skipped_by_recall_with_a_warning(
    vault: memvault.Vault, root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _agent_retain(vault, "tea is fine\n")
    target = tmp_path / "outside.md"
    target.write_text("tea secret outside\n")
    (root / "w1/agents/ada/pins.md").symlink_to(target)
    with caplog.at_level(logging.WARNING, logger="memvault_local_disk"):
        hits = vault.recall(RecallRequest(workspace_id="w1", agent_id="ada", query="tea")).hits
    assert [h.source for h in hits] == ["AGENT.md"]
    assert "pins.md" in caplog.text


def test_undecodable_document_read_names_its_label(vault: memvault.Vault, root: Path) -> None:
    _agent_retain(vault, "ok\n")
    (root / "w1/agents/ada/pins.md").write_bytes(b"caf\xe9 latin-1\n")
    with pytest.raises(UpstreamError, match=r"pins\.md.*not valid UTF-8"):
        vault.read(ReadRequest(workspace_id="w1", agent_id="ada", tier="pins"))


def test_undecodable_document_is_skipped_by_recall_and_logged(
    vault: memvault.Vault, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _agent_retain(vault, "latin notes\n")
    (root / "w1/agents/ada/pins.md").write_bytes(b"latin caf\xe9\n")
    with caplog.at_level(logging.WARNING, logger="memvault_local_disk"):
        hits = vault.recall(RecallRequest(workspace_id="w1", agent_id="ada", query="latin")).hits
    assert [h.source for h in hits] == ["AGENT.md"]
    assert "pins.md" in caplog.text
    assert "UTF-8" in caplog.text


def test_append_to_an_undecodable_document_is_refused_unchanged(vault: memvault.Vault, root: Path) -> None:
    path = root / "w1/agents/ada/pins.md"
    _agent_retain(vault, "ok\n")
    path.write_bytes(b"caf\xe9\n")
    with pytest.raises(UpstreamError, match="UTF-8"):
        _agent_retain(vault, "more\n", tier="pins")
    assert path.read_bytes() == b"caf\xe9\n"


def test_replace_repairs_an_undecodable_document(vault: memvault.Vault, root: Path) -> None:
    path = root / "w1/agents/ada/pins.md"
    _agent_retain(vault, "ok\n")
    path.write_bytes(b"caf\xe9\n")
    vault.retain(RetainRequest(workspace_id="w1", agent_id="ada", tier="pins", content="café\n", mode="replace"))
    assert vault.read(ReadRequest(workspace_id="w1", agent_id="ada", tier="pins")).content == "café\n"


def test_a_file_where_a_folder_belongs_is_an_upstream_error(vault: memvault.Vault, root: Path) -> None:
    (root / "w1").mkdir(parents=True)
    (root / "w1/agents").write_text("not a folder")
    with pytest.raises(UpstreamError, match="not a folder"):
        _agent_retain(vault, "x\n")


def test_health_ok_on_a_writable_root_and_leaves_nothing(vault: memvault.Vault, root: Path) -> None:
    """P25/P27."""
    root.mkdir()
    status = vault.health()
    assert status.ok
    assert status.message == ""
    assert list(root.iterdir()) == []


def test_health_reports_a_missing_root(vault: memvault.Vault) -> None:
    """P27: a missing root is ok=False with its own message, even if it would be created on write."""
    status = vault.health()
    assert not status.ok
    assert "does not exist" in status.message
    assert status.checked_at.tzinfo is not None


def test_health_reports_a_root_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with memvault.open("local-disk", root=str(tmp_path / "file")) as v:
        status = v.health()
    assert not status.ok
    assert "not a directory" in status.message


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_health_reports_an_unwritable_root(vault: memvault.Vault, root: Path) -> None:
    root.mkdir()
    root.chmod(0o500)
    try:
        status = vault.health()
    finally:
        root.chmod(0o700)
    assert not status.ok
    assert "not writable" in status.message


def test_health_reports_a_root_nobody_may_write(vault: memvault.Vault) -> None:
    """P27 as any user, uid 0 included: /proc refuses new files for everyone."""
    with memvault.open("local-disk", root="/proc") as v:
        status = v.health()
    assert not status.ok
    assert "not writable" in status.message


def test_storage_failure_is_an_upstream_error_with_the_cause_chained(tmp_path: Path) -> None:
    """P28: an OSError never escapes raw."""
    with memvault.open("local-disk", root="/proc/memvault-cannot-exist") as v, pytest.raises(UpstreamError) as info:
        _agent_retain(v, "x\n")
    assert isinstance(info.value.__cause__, OSError)


def test_symlinked_daily_folder_is_skipped_by_recall_and_refused_for_writes(
    vault: memvault.Vault, root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _agent_retain(vault, "tea at noon\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "2026-01-01.md").write_text("tea secret outside\n")
    (root / "w1/agents/ada/daily").symlink_to(outside, target_is_directory=True)
    with caplog.at_level(logging.WARNING, logger="memvault_local_disk"):
        hits = vault.recall(RecallRequest(workspace_id="w1", agent_id="ada", query="tea")).hits
    assert [h.source for h in hits] == ["AGENT.md"]
    assert "symlink" in caplog.text
    with pytest.raises(UpstreamError, match="symlink"):
        _agent_retain(vault, "x\n", tier="daily", key="2026-01-02")
    assert sorted(p.name for p in outside.iterdir()) == ["2026-01-01.md"]


def test_settings_given_as_strings_are_coerced(root: Path) -> None:
    """The CLI and config pass strings: cache_bytes='0' works like 0."""
    with memvault.open("local-disk", root=str(root), cache_bytes="0") as v:
        _agent_retain(v, "coerced\n")
        assert v.recall(RecallRequest(workspace_id="w1", agent_id="ada", query="coerced")).hits


def test_a_negative_cache_budget_is_refused(root: Path) -> None:
    with pytest.raises(InvalidRequest, match="cache_bytes"):
        memvault.open("local-disk", root=str(root), cache_bytes=-1)


def test_a_folder_where_a_document_belongs_is_an_upstream_error(vault: memvault.Vault, root: Path) -> None:
    (root / "w1/agents/ada/pins.md").mkdir(parents=True)
    with pytest.raises(UpstreamError, match="not a regular file"):
        vault.retain(RetainRequest(workspace_id="w1", agent_id="ada", tier="pins", content="x", mode="replace"))
    assert (root / "w1/agents/ada/pins.md").is_dir()
