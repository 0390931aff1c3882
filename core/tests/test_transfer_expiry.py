"""Export and import keep expiring memory expiring (P42): an import never makes it permanent."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import pytest

import memvault
from memvault import NotSupported, ReadRequest, RetainRequest
from memvault.contract.clock import ManualClock, use_clock
from memvault.contract.models import ListDocumentsRequest, QuarantineRecord, body_sha256
from memvault.providers.memory import MemoryProvider
from memvault.transfer import export_store, import_store, verify_import
from memvault.vault import Vault

HOUR = dt.timedelta(hours=1)


@pytest.fixture(autouse=True)
def _words_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMVAULT_EMBEDDER", "off")


def _put(vault: Vault, content: str, **kw: Any) -> None:
    fields: dict[str, Any] = {"workspace_id": "w", "agent_id": "a", "tier": "peers", "mode": "append"}
    fields.update(kw)
    vault.retain(RetainRequest(content=content, **fields))


def _export(vault: Vault, tmp_path: Path) -> Path:
    out = io.StringIO()
    export_store(vault, out)
    path = tmp_path / "export.jsonl"
    path.write_text(out.getvalue())
    return path


def _lines(path: Path, kind: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [row for row in rows if row["kind"] == kind]


def test_export_omits_expired_documents_and_carries_each_documents_expiry(tmp_path: Path) -> None:
    clock = ManualClock()
    with use_clock(clock), memvault.open("memory", scanner="off", retention={"daily": "30d"}) as vault:
        _put(vault, "gone soon\n", key="short", expires_at=clock() + HOUR)
        _put(vault, "kept a day\n", key="day", expires_at=clock() + 24 * HOUR)
        _put(vault, "for ever\n", key="ever")
        _put(vault, "a daily line\n", tier="daily", key="2026-01-01")
        clock.advance(2 * HOUR)
        path = _export(vault, tmp_path)
    docs = {row["document"]["label"]: row["document"] for row in _lines(path, "document")}
    assert set(docs) == {"peers/day.md", "peers/ever.md", "daily/2026-01-01.md"}
    assert "gone soon" not in path.read_text()
    day = dt.datetime.fromisoformat(docs["peers/day.md"]["expires_at"])
    assert day == clock() - 2 * HOUR + 24 * HOUR
    assert "expires_at" not in docs["peers/ever.md"]
    # The tier's retention is part of the document's effective expiry: the file carries it too.
    daily = dt.datetime.fromisoformat(docs["daily/2026-01-01.md"]["expires_at"])
    assert daily == clock() - 2 * HOUR + dt.timedelta(days=30)


def test_import_keeps_the_expiry_and_leaves_out_what_expired_since(tmp_path: Path) -> None:
    clock = ManualClock()
    with use_clock(clock):
        with memvault.open("memory", scanner="off") as source:
            _put(source, "kept a day\n", key="day", expires_at=clock() + 24 * HOUR)
            _put(source, "kept an hour\n", key="hour", expires_at=clock() + HOUR)
            _put(source, "for ever\n", key="ever")
            path = _export(source, tmp_path)
        clock.advance(2 * HOUR)
        with memvault.open("memory", scanner="off") as target:
            summary = import_store(target, path)
            assert summary.written == 2
            assert len(summary.expired) == 1
            assert "peers/hour.md" in summary.expired[0]
            assert summary.not_imported == []
            assert verify_import(target, path) == []
            listed = {d.label: d.expires_at for d in target.list_documents(ListDocumentsRequest()).documents}
            assert listed == {"peers/day.md": clock() - 2 * HOUR + 24 * HOUR, "peers/ever.md": None}
            clock.advance(23 * HOUR)
            read = ReadRequest(workspace_id="w", agent_id="a", tier="peers", key="day")
            assert target.read(read).content == ""


def test_import_refuses_expiring_content_for_a_target_without_expiry_before_writing(tmp_path: Path) -> None:
    with memvault.open("memory", scanner="off") as source:
        _put(source, "for ever\n", key="ever")
        _put(source, "kept a day\n", key="day", expires_at=dt.datetime.now(dt.timezone.utc) + 24 * HOUR)
        path = _export(source, tmp_path)
    caps = MemoryProvider.capabilities - {memvault.Capability.EXPIRY, memvault.Capability.IDEMPOTENT_WRITES}
    target = Vault(MemoryProvider(), name="forever", capabilities=caps)
    with pytest.raises(NotSupported, match="'forever'.*expir"):
        import_store(target, path)
    assert target.list_documents(ListDocumentsRequest()).documents == []


def test_quarantine_copies_keep_their_expiry_through_export_and_import(tmp_path: Path) -> None:
    clock = ManualClock()
    body = "a rejected body\n"

    def copy(expires: dt.datetime | None) -> QuarantineRecord:
        text = body if expires is None else body + "x\n"
        return QuarantineRecord(
            workspace_id="w",
            agent_id="a",
            label="pins.md",
            category="test",
            pattern="p",
            sha256=body_sha256(text),
            content=text,
            expires_at=expires,
        )

    with use_clock(clock):
        with memvault.open("memory", scanner="off") as source:
            _put(source, "for ever\n", key="ever")
            source.quarantine_keep(copy(None))
            source.quarantine_keep(copy(clock() + HOUR))
            path = _export(source, tmp_path)
        assert len(_lines(path, "quarantine")) == 2
        with memvault.open("memory", scanner="off") as target:
            import_store(target, path)
            assert len(target.quarantine_list("w")) == 2
            clock.advance(2 * HOUR)
            assert [r.expires_at for r in target.quarantine_list("w")] == [None]
        with memvault.open("memory", scanner="off") as late:
            summary = import_store(late, path)
            assert summary.quarantine_kept == 1
