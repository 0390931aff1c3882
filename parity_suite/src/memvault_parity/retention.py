"""Memory over time (P41-P43): expiry, tier retention, the sweep, and what "gone" means.

Time moves through :func:`memvault.contract.clock.use_clock` for a provider in this
process: a test jumps an hour or a year at once. A provider that answers over a
network (``remote``) reads its own service's clock, which no override reaches: its
tests use real expiries a second or two ahead and wait for them (bounded), and
the tests that need a jump of hours, or a policy the service does not have, skip.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memvault
from memvault.contract.clock import ManualClock, use_clock
from memvault.contract.models import Capability
from memvault.contract.retention import RetentionPolicy
from memvault.scanner.plugin import BuiltinScanner
from memvault_parity.base import SuiteBase, requires, requires_absent
from memvault_parity.forget import _files_containing
from memvault_parity.scanner import INJECTION
from memvault_parity.vectors import ConceptEmbedder

__all__ = ["ExpiryTests", "TimeMachine"]

#: How far ahead a remote test's expiry is, and the longest it waits for one (seconds).
REMOTE_EXPIRY = 1.0
REMOTE_WAIT_LIMIT = 3.0


class TimeMachine:
    """The time the provider under test reads, and a way to move it forward.

    In-process: a :class:`ManualClock` installed with ``use_clock`` (moves at once).
    Remote: the real time; :meth:`advance` sleeps (at most :data:`REMOTE_WAIT_LIMIT` per test).
    """

    def __init__(self, remote: bool) -> None:
        self.remote = remote
        self.clock = ManualClock()
        self._waited = 0.0

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.timezone.utc) if self.remote else self.clock()

    def soon(self) -> dt.datetime:
        """An expiry a little ahead: :data:`REMOTE_EXPIRY` seconds (remote) or an hour."""
        return self.now() + (dt.timedelta(seconds=REMOTE_EXPIRY) if self.remote else dt.timedelta(hours=1))

    def past_soon(self) -> None:
        """Move past :meth:`soon`'s expiry."""
        if self.remote:
            wait = REMOTE_EXPIRY + 0.3
            assert self._waited + wait <= REMOTE_WAIT_LIMIT, "a remote test may wait 3 s at most"
            self._waited += wait
            time.sleep(wait)
        else:
            self.clock.advance(dt.timedelta(hours=1, seconds=1))

    def advance(self, delta: dt.timedelta) -> None:
        assert not self.remote, "only an in-process provider's time jumps"
        self.clock.advance(delta)


class ExpiryTests(SuiteBase):
    """P41-P43: an expiry on a write, the tier retention, the sweep; ``expiry`` providers only."""

    @pytest.fixture
    def time_machine(self, provider_capabilities: frozenset[str]) -> Iterator[TimeMachine]:
        machine = TimeMachine(Capability.REMOTE in provider_capabilities)
        if machine.remote:
            yield machine
            return
        with use_clock(machine.clock):
            yield machine

    @staticmethod
    def with_policy(vault: memvault.Vault, policy: dict[str, Any]) -> memvault.Vault:
        """Another vault on the same provider instance, applying ``policy`` (a ``[retention]`` table)."""
        return memvault.Vault(
            vault.provider,
            name=vault.name,
            capabilities=vault.capabilities,
            retention=RetentionPolicy.from_config(policy),
            background_sweep=False,
        )

    def expiring(self, vault: memvault.Vault, ws: str, content: str, when: dt.datetime, **fields: Any) -> None:
        request = memvault.RetainRequest(
            workspace_id=ws,
            agent_id=fields.pop("agent", "agent-1"),
            tier=fields.pop("tier", "peers"),
            key=fields.pop("key", "pat"),
            mode=fields.pop("mode", "append"),
            content=content,
            expires_at=when,
            data_subject_id=fields.pop("subject", ""),
        )
        assert not fields
        vault.retain(request)

    @staticmethod
    def labels(vault: memvault.Vault, ws: str) -> list[str]:
        if Capability.LIST_DOCUMENTS not in vault.capabilities:
            return []
        return [d.label for d in vault.list_documents(memvault.ListDocumentsRequest(workspace_id=ws)).documents]

    # -- P41: the expiry on a write -------------------------------------------------------

    @requires(Capability.EXPIRY)
    def test_p41_an_expiry_must_be_aware_and_in_the_future(
        self, vault: memvault.Vault, ws: str, time_machine: TimeMachine
    ) -> None:
        """P41: a naive expiry is InvalidRequest naming expires_at; one not after now is refused "in the past";
        nothing is written."""
        with pytest.raises(memvault.InvalidRequest) as naive:
            self.expiring(vault, ws, "never stored\n", dt.datetime(2099, 1, 1))
        assert naive.value.field == "expires_at"
        for when in (time_machine.now() - dt.timedelta(seconds=5), time_machine.now() - dt.timedelta(days=1)):
            with pytest.raises(memvault.InvalidRequest, match="in the past") as past:
                self.expiring(vault, ws, "never stored\n", when)
            assert past.value.field == "expires_at"
        assert self.body(vault, ws, tier="peers", key="pat") == ""

    @requires(Capability.EXPIRY)
    def test_p41_an_append_naming_another_expiry_is_refused_and_writes_nothing(
        self, vault: memvault.Vault, ws: str, time_machine: TimeMachine
    ) -> None:
        """P41: an expiry applies to the whole document: an append with another one (or one, to a document
        without) is InvalidRequest naming the label; the same expiry, or none, appends."""
        when = time_machine.now() + dt.timedelta(days=2)
        self.expiring(vault, ws, "first line\n", when)
        self.expiring(vault, ws, "same expiry\n", when)
        self.put(vault, ws, "no expiry given\n", tier="peers", key="pat")
        with pytest.raises(memvault.InvalidRequest, match=r"peers/pat\.md") as other:
            self.expiring(vault, ws, "another expiry\n", when + dt.timedelta(hours=1))
        assert other.value.field == "expires_at"
        self.put(vault, ws, "kept for ever\n", tier="peers", key="sam")
        with pytest.raises(memvault.InvalidRequest, match=r"peers/sam\.md"):
            self.expiring(vault, ws, "now expiring\n", when, key="sam")
        assert self.body(vault, ws, tier="peers", key="pat") == "first line\nsame expiry\nno expiry given\n"
        assert self.body(vault, ws, tier="peers", key="sam") == "kept for ever\n"

    # -- P42: absent from the moment it expires -----------------------------------------

    @requires(Capability.EXPIRY)
    def test_p42_an_expired_document_is_absent_for_every_verb(
        self, vault: memvault.Vault, ws: str, time_machine: TimeMachine
    ) -> None:
        """P42/P43: read, recall and list hide it from the moment it expires, before any sweep; health counts
        it as overdue; a document without expiry stays."""
        self.expiring(vault, ws, "the heron nests by the mill\n", time_machine.soon())
        self.put(vault, ws, "the heron also fishes at dawn\n", tier="pins")
        assert self.body(vault, ws, tier="peers", key="pat") == "the heron nests by the mill\n"
        assert len(self.find(vault, ws, "heron")) == 2
        time_machine.past_soon()
        assert self.body(vault, ws, tier="peers", key="pat") == ""
        assert [h.source for h in self.find(vault, ws, "heron")] == ["pins.md"]
        assert self.find(vault, ws, "mill") == []
        if Capability.LIST_DOCUMENTS in vault.capabilities:
            assert self.labels(vault, ws) == ["pins.md"]
        if not time_machine.remote:  # a service may have swept it already
            assert vault.health().retention_overdue >= 1, "P43: health counts what waits for the sweep"

    @requires(Capability.EXPIRY)
    @requires_absent(Capability.REMOTE)
    def test_p42_expiry_takes_effect_at_the_exact_moment(
        self, vault: memvault.Vault, ws: str, time_machine: TimeMachine
    ) -> None:
        """P42: present a microsecond before expires_at, absent at it."""
        when = time_machine.now() + dt.timedelta(minutes=10)
        self.expiring(vault, ws, "the lark sings\n", when)
        time_machine.clock.set(when - dt.timedelta(microseconds=1))
        assert self.body(vault, ws, tier="peers", key="pat") == "the lark sings\n"
        assert len(self.find(vault, ws, "lark")) == 1
        time_machine.clock.set(when)
        assert self.body(vault, ws, tier="peers", key="pat") == ""
        assert self.find(vault, ws, "lark") == []

    @requires(Capability.EXPIRY)
    def test_p41_an_append_keeps_the_documents_expiry(
        self, vault: memvault.Vault, ws: str, time_machine: TimeMachine
    ) -> None:
        """P41/P42: an append without expires_at keeps the document's: the appended line expires with it; a
        replace without one makes the document permanent."""
        self.expiring(vault, ws, "first kestrel\n", time_machine.soon())
        self.put(vault, ws, "second kestrel\n", tier="peers", key="pat")
        self.expiring(vault, ws, "replaced osprey\n", time_machine.soon(), key="sam")
        self.put(vault, ws, "permanent osprey\n", tier="peers", key="sam", mode="replace")
        time_machine.past_soon()
        assert self.body(vault, ws, tier="peers", key="pat") == ""
        assert self.find(vault, ws, "kestrel") == []
        assert self.body(vault, ws, tier="peers", key="sam") == "permanent osprey\n"

    @requires(Capability.EXPIRY)
    def test_p42_an_append_to_an_expired_document_starts_a_new_body(
        self, vault: memvault.Vault, ws: str, time_machine: TimeMachine
    ) -> None:
        """P42: the old text never resurfaces, counts toward no cap and keeps none of its subjects;
        forget by id of an expired document reports 0."""
        old = "an old secret line that should be gone\n" * 36  # 1,404 of the peers tier's 1,500 bytes
        self.expiring(vault, ws, old, time_machine.soon(), subject="subject-old")
        self.expiring(vault, ws, "a short-lived note\n", time_machine.soon(), key="sam")
        time_machine.past_soon()
        result = self.put(vault, ws, "a fresh start, well under the cap\n", tier="peers", key="pat")
        assert (result.bytes, result.warning) == (34, "")
        assert self.body(vault, ws, tier="peers", key="pat") == "a fresh start, well under the cap\n"
        assert self.find(vault, ws, "secret") == []
        if Capability.CASCADE_FORGET in vault.capabilities:
            assert self.drop(vault, ws, subject="subject-old") == 0
            assert self.body(vault, ws, tier="peers", key="pat") == "a fresh start, well under the cap\n"
        assert self.drop(vault, ws, label="peers/sam.md") == 0

    # -- P43: retention and the sweep -----------------------------------------------------

    @requires(Capability.EXPIRY)
    @requires_absent(Capability.REMOTE)  # a service sweeps its own store
    def test_p43_the_sweep_removes_expired_documents_and_their_text(
        self, vault: memvault.Vault, ws: str, time_machine: TimeMachine, tmp_path: Path
    ) -> None:
        """P43: a dry run lists and keeps; the sweep removes the document, its index rows and its bytes
        (no file of a scratch store holds its text, as after an erasure), and health's overdue count drops to 0."""
        secret = f"sweepable{uuid.uuid4().hex}"
        self.expiring(vault, ws, f"the code word is {secret}\n" * 20, time_machine.soon(), subject="subject-s")
        self.put(vault, ws, "a bystander line\n", tier="pins")
        time_machine.past_soon()
        dry = vault.sweep_expired(dry_run=True)
        assert "peers/pat.md" in [d.label for d in dry.documents if d.workspace_id == ws]
        assert vault.health().retention_overdue >= 1, "P43: a dry run removes nothing"
        report = vault.sweep_expired()
        assert [d.label for d in report.documents if d.workspace_id == ws] == ["peers/pat.md"]
        assert vault.health().retention_overdue == 0
        assert self.find(vault, ws, secret) == []
        assert self.body(vault, ws, tier="pins") == "a bystander line\n"
        if Capability.CASCADE_FORGET in vault.capabilities:
            assert self.drop(vault, ws, subject="subject-s") == 0
        vault.health()  # give a provider the chance to checkpoint, as a real process would
        assert _files_containing(tmp_path, secret.encode()) == []

    @requires(Capability.EXPIRY, Capability.VECTORS)
    @requires_absent(Capability.REMOTE)  # a service sweeps its own store
    def test_p43_the_sweep_removes_the_documents_vectors(
        self, vault: memvault.Vault, ws: str, time_machine: TimeMachine
    ) -> None:
        """P43: vectors go with a swept document: the same line written again afterwards waits for a
        vector of its own."""
        meaning = memvault.Vault(
            vault.provider,
            name=vault.name,
            capabilities=vault.capabilities,
            embedder=ConceptEmbedder(),
            background_embedding=False,
            background_sweep=False,
        )
        self.expiring(meaning, ws, "Owns a Subaru.\n", time_machine.soon())
        meaning.embed_pending(timeout=60)
        assert meaning.embedding_backlog() == 0
        time_machine.past_soon()
        assert "peers/pat.md" in [d.label for d in meaning.sweep_expired().documents if d.workspace_id == ws]
        self.put(meaning, ws, "Owns a Subaru.\n", tier="peers", key="pat")
        assert meaning.embedding_backlog() == 1, "P43: the swept document's vector is gone"

    @requires(Capability.EXPIRY, Capability.QUARANTINE)
    @requires_absent(Capability.REMOTE)  # a service sweeps its own store
    def test_p43_quarantine_copies_expire_and_go_with_their_document(
        self, vault: memvault.Vault, ws: str, time_machine: TimeMachine
    ) -> None:
        """P42/P43: a rejected write's copy expires with the write's expires_at (list and get omit it);
        the copy of a rejected append to an expiring document is swept with the document."""
        scanned = memvault.Vault(
            vault.provider,
            name=vault.name,
            capabilities=vault.capabilities,
            plugins=[BuiltinScanner()],
            background_sweep=False,
        )
        with pytest.raises(memvault.ContentRejected) as own:
            self.expiring(scanned, ws, INJECTION, time_machine.soon(), key="sam")
        self.expiring(scanned, ws, "Prefers metric units.\n", time_machine.soon())
        with pytest.raises(memvault.ContentRejected) as appended:
            self.put(scanned, ws, INJECTION, tier="peers", key="pat")
        kept = {r.sha256 for r in scanned.quarantine_list(ws)}
        assert {own.value.sha256, appended.value.sha256} <= kept
        time_machine.past_soon()
        assert own.value.sha256 not in {r.sha256 for r in scanned.quarantine_list(ws)}
        assert scanned.quarantine_get(ws, own.value.sha256) is None
        report = scanned.sweep_expired()
        assert report.quarantine_removed >= 2
        assert scanned.quarantine_list(ws) == []

    @requires(Capability.EXPIRY)
    @requires_absent(Capability.REMOTE)
    def test_p43_tier_retention_with_a_workspace_override(
        self, vault: memvault.Vault, ws: str, time_machine: TimeMachine
    ) -> None:
        """P43: a tier's retention runs from the document's last write; a workspace's override wins ("off":
        kept); other tiers are untouched."""
        other = self.new_workspace()
        kept = self.new_workspace()
        policy = {"daily": "2h", "workspaces": {other: {"daily": "30m"}, kept: {"daily": "off"}}}
        aged = self.with_policy(vault, policy)
        for workspace in (ws, other, kept):
            self.put(aged, workspace, "walked the dog\n", tier="daily", key="2026-01-01")
            self.put(aged, workspace, "a pinned fact\n", tier="pins")
        time_machine.advance(dt.timedelta(hours=1))
        self.put(aged, ws, "fed the cat\n", tier="daily", key="2026-01-01")  # the last write restarts it
        assert self.body(aged, other, tier="daily", key="2026-01-01") == ""
        time_machine.advance(dt.timedelta(hours=1, minutes=30))
        assert self.body(aged, ws, tier="daily", key="2026-01-01") == "walked the dog\nfed the cat\n"
        time_machine.advance(dt.timedelta(hours=1))
        assert self.body(aged, ws, tier="daily", key="2026-01-01") == ""
        assert self.body(aged, kept, tier="daily", key="2026-01-01") == "walked the dog\n"
        for workspace in (ws, other, kept):
            assert self.body(aged, workspace, tier="pins") == "a pinned fact\n"

    @requires(Capability.EXPIRY)
    @requires_absent(Capability.REMOTE)
    def test_p43_a_shortened_policy_reaches_older_documents_at_the_sweep(
        self, vault: memvault.Vault, ws: str, time_machine: TimeMachine
    ) -> None:
        """P43: documents written before a policy keep their expiry until the sweep, which applies the policy's
        cutoffs to their last write."""
        self.put(vault, ws, "an old daily line\n", tier="daily", key="2026-01-01")
        self.put(vault, ws, "a recent daily line\n", tier="daily", key="2026-01-02")
        time_machine.advance(dt.timedelta(days=10))
        self.put(vault, ws, "written today\n", tier="daily", key="2026-01-02")
        aged = self.with_policy(vault, {"daily": "7d"})
        assert self.body(aged, ws, tier="daily", key="2026-01-01") == "an old daily line\n"
        swept = [d.label for d in aged.sweep_expired().documents if d.workspace_id == ws]
        assert swept == ["daily/2026-01-01.md"]
        assert self.body(aged, ws, tier="daily", key="2026-01-01") == ""
        assert self.body(aged, ws, tier="daily", key="2026-01-02") == "a recent daily line\nwritten today\n"
