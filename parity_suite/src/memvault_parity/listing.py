"""list_documents: the optional enumerate hook behind export and ``memvault inspect`` (P32)."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest

import memvault
from memvault.contract.models import Capability, DocumentInfo, ListDocumentsRequest
from memvault_parity.base import SuiteBase, requires, requires_absent

__all__ = ["ListingTests"]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _listed(vault: memvault.Vault, ws: str, **filters: str) -> list[DocumentInfo]:
    return vault.list_documents(ListDocumentsRequest(workspace_id=ws, **filters)).documents


def _rows(documents: list[DocumentInfo]) -> list[tuple[str, str, str, str, int, str]]:
    return [(d.agent_id, d.crew_id, d.tier.value, d.label, d.bytes, d.digest) for d in documents]


class ListingTests(SuiteBase):
    """Enumerating documents: every one a verb could read, its size and digest, in partition order."""

    def _fill(self, vault: memvault.Vault, ws: str) -> dict[tuple[str, str, str], str]:
        """Five documents in two agents and a crew; returns (agent, crew, label) -> body."""
        bodies = {
            ("agent-1", "", "AGENT.md"): "Prefers metric units.\n",
            ("agent-1", "", "daily/2026-01-31.md"): "- went hiking\n",
            ("agent-1", "", "peers/bob.md"): "Bob likes tea. Ünïcode ✓\n",
            ("agent-2", "", "pins.md"): "pinned fact\n",
            ("", "crew-1", "CREW.md"): "crew plan\n",
        }
        self.put(vault, ws, bodies[("agent-1", "", "AGENT.md")])
        self.put(vault, ws, bodies[("agent-1", "", "daily/2026-01-31.md")], tier="daily", key="2026-01-31")
        self.put(vault, ws, bodies[("agent-1", "", "peers/bob.md")], tier="peers", key="bob")
        self.put(vault, ws, bodies[("agent-2", "", "pins.md")], tier="pins", agent="agent-2")
        self.put(vault, ws, bodies[("", "crew-1", "CREW.md")], tier="CREW")
        return bodies

    @requires(Capability.LIST_DOCUMENTS)
    def test_list_documents_reports_every_document_with_its_size_and_digest(
        self, vault: memvault.Vault, ws: str
    ) -> None:
        """P32: one entry per stored document: owner, tier, label, bytes of the body and its sha256."""
        bodies = self._fill(vault, ws)
        tiers = {"AGENT.md": "AGENT", "daily/2026-01-31.md": "daily", "peers/bob.md": "peers", "pins.md": "pins"}
        expected = sorted(
            (agent, crew, tiers.get(label, "CREW"), label, len(body.encode("utf-8")), _sha(body))
            for (agent, crew, label), body in bodies.items()
        )
        documents = _listed(vault, ws)
        assert sorted(_rows(documents)) == expected
        assert {d.workspace_id for d in documents} == {ws}

    @requires(Capability.LIST_DOCUMENTS)
    def test_list_documents_is_sorted_by_workspace_crew_agent_and_label(self, vault: memvault.Vault, ws: str) -> None:
        """P32: the listing comes in (workspace_id, crew_id, agent_id, label) order."""
        self._fill(vault, ws)
        documents = _listed(vault, ws)
        keys = [(d.workspace_id, d.crew_id, d.agent_id, d.label) for d in documents]
        assert keys == sorted(keys)
        assert len(keys) == 5

    @requires(Capability.LIST_DOCUMENTS)
    def test_list_documents_never_reports_another_workspace(self, vault: memvault.Vault, ws: str) -> None:
        """P32: listing one workspace shows none of another's documents, even at the same labels."""
        other = self.new_workspace()
        self._fill(vault, ws)
        self.put(vault, other, "other workspace\n")
        assert [(d.workspace_id, d.label) for d in _listed(vault, other)] == [(other, "AGENT.md")]
        assert all(d.workspace_id == ws for d in _listed(vault, ws))

    @requires(Capability.LIST_DOCUMENTS)
    def test_list_documents_of_an_unknown_workspace_is_empty(self, vault: memvault.Vault, ws: str) -> None:
        """P32: a workspace nothing was written to lists no documents (no error)."""
        assert _listed(vault, ws) == []

    @requires(Capability.LIST_DOCUMENTS)
    def test_list_documents_filters_by_agent_crew_and_tier(self, vault: memvault.Vault, ws: str) -> None:
        """P32: agent_id keeps that agent's documents, crew_id that crew's, both the union; tier one tier."""
        self._fill(vault, ws)
        agent = {(d.agent_id, d.label) for d in _listed(vault, ws, agent_id="agent-1")}
        assert agent == {("agent-1", "AGENT.md"), ("agent-1", "daily/2026-01-31.md"), ("agent-1", "peers/bob.md")}
        assert [(d.crew_id, d.label) for d in _listed(vault, ws, crew_id="crew-1")] == [("crew-1", "CREW.md")]
        both = {d.label for d in _listed(vault, ws, agent_id="agent-2", crew_id="crew-1")}
        assert both == {"pins.md", "CREW.md"}
        assert [d.label for d in _listed(vault, ws, tier="daily")] == ["daily/2026-01-31.md"]
        assert _listed(vault, ws, agent_id="agent-2", tier="AGENT") == []

    @requires(Capability.LIST_DOCUMENTS)
    def test_list_documents_follows_appends_replaces_and_forgets(self, vault: memvault.Vault, ws: str) -> None:
        """P32: size and digest describe the current body; a forgotten document leaves the listing."""
        self.put(vault, ws, "one\n")
        self.put(vault, ws, "two\n")
        [doc] = _listed(vault, ws)
        assert (doc.bytes, doc.digest) == (8, _sha("one\ntwo\n"))
        self.put(vault, ws, "três\n", mode="replace")
        [doc] = _listed(vault, ws)
        assert (doc.bytes, doc.digest) == (len("três\n".encode()), _sha("três\n"))
        assert doc.digest == _sha(self.body(vault, ws))
        assert self.drop(vault, ws, label="AGENT.md") == 1
        assert _listed(vault, ws) == []

    @requires(Capability.LIST_DOCUMENTS)
    def test_list_documents_updated_at_is_aware_and_recent(self, vault: memvault.Vault, ws: str) -> None:
        """P32: updated_at, when a provider reports it, is timezone-aware and moves with each write."""
        before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5)
        self.put(vault, ws, "dated\n")
        [doc] = _listed(vault, ws)
        if doc.updated_at is None:
            return  # optional: the provider does not know when a document changed
        assert doc.updated_at.utcoffset() is not None
        assert before <= doc.updated_at <= dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=5)

    @requires(Capability.LIST_DOCUMENTS, Capability.CASCADE_FORGET)
    def test_list_documents_reports_the_data_subject_of_a_tagged_document(self, vault: memvault.Vault, ws: str) -> None:
        """P32: subjects lists the data subject a write tagged the document with; untagged ones have none."""
        self.put(vault, ws, "tagged\n", subject="subject-1")
        self.put(vault, ws, "untagged\n", tier="pins")
        subjects = {d.label: d.subjects for d in _listed(vault, ws)}
        assert subjects == {"AGENT.md": ("subject-1",), "pins.md": ()}

    @requires_absent(Capability.LIST_DOCUMENTS)
    def test_list_documents_without_the_capability_is_not_supported(self, vault: memvault.Vault, ws: str) -> None:
        """P32: a provider without the enumerate hook raises NotSupported naming the provider."""
        hooks = vault.plugin_manager.hook.memvault_list_documents.get_hookimpls()
        if any(impl.plugin is vault.provider for impl in hooks):
            pytest.skip("the provider implements memvault_list_documents without declaring list_documents")
        with pytest.raises(memvault.NotSupported, match=vault.name):
            _listed(vault, ws)
