"""Idempotent writes (P44, P45): a retain repeated with its key writes once; ``idempotent_writes`` providers only."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest

import memvault
from memvault.contract.clock import ManualClock, use_clock
from memvault.contract.models import Capability
from memvault.contract.retention import RetentionPolicy
from memvault_parity.base import SuiteBase, requires, requires_absent, retain_request

__all__ = ["IdempotencyTests"]


def keyed(ws: str, content: str, op: str, **fields: Any) -> memvault.RetainRequest:
    """A retain request with an idempotency key (``fields`` as :func:`retain_request` takes them)."""
    request = retain_request(ws, content, **fields)
    return memvault.RetainRequest(
        workspace_id=request.workspace_id,
        agent_id=request.agent_id,
        crew_id=request.crew_id,
        tier=request.tier,
        key=request.key,
        content=request.content,
        mode=request.mode,
        data_subject_id=request.data_subject_id,
        idempotency_key=op,
    )


class IdempotencyTests(SuiteBase):
    """P44/P45: a key names one write; its repeat returns the first result and writes nothing."""

    @requires(Capability.IDEMPOTENT_WRITES)
    def test_p44_a_repeat_returns_the_first_result_and_writes_nothing(self, vault: memvault.Vault, ws: str) -> None:
        """P44: the body does not double; a repeat after the document changed still writes nothing and returns
        the recorded result."""
        first = vault.retain(keyed(ws, "met Ana at the pier\n", "op-1"))
        again = vault.retain(keyed(ws, "met Ana at the pier\n", "op-1"))
        assert again == first
        assert self.body(vault, ws) == "met Ana at the pier\n"
        self.put(vault, ws, "a later line\n")
        late = vault.retain(keyed(ws, "met Ana at the pier\n", "op-1"))
        assert late == first, "P44: the recorded result, not the document's current size"
        assert self.body(vault, ws) == "met Ana at the pier\na later line\n"
        assert len(self.find(vault, ws, "Ana pier")) == 1

    @requires(Capability.IDEMPOTENT_WRITES)
    def test_p44_the_same_key_for_another_write_is_a_conflict(self, vault: memvault.Vault, ws: str) -> None:
        """P44: another content, mode, document or subject under a used key is IdempotencyConflict naming the
        key; nothing is written. Keys are scoped to their workspace."""
        vault.retain(keyed(ws, "the first write\n", "op-2"))
        others = [
            keyed(ws, "another content\n", "op-2"),
            keyed(ws, "the first write\n", "op-2", mode="replace"),
            keyed(ws, "the first write\n", "op-2", tier="pins"),
            keyed(ws, "the first write\n", "op-2", agent="agent-2"),
            keyed(ws, "the first write\n", "op-2", subject="subject-k"),
        ]
        for request in others:
            with pytest.raises(memvault.IdempotencyConflict, match="op-2"):
                vault.retain(request)
        assert self.body(vault, ws) == "the first write\n"
        assert (self.body(vault, ws, tier="pins"), self.body(vault, ws, agent="agent-2")) == ("", "")
        elsewhere = self.new_workspace()
        vault.retain(keyed(elsewhere, "another content\n", "op-2"))
        assert self.body(vault, elsewhere) == "another content\n"

    @requires(Capability.IDEMPOTENT_WRITES)
    def test_p44_concurrent_first_uses_of_a_key_write_once(
        self, open_vault: Callable[[], memvault.Vault], ws: str
    ) -> None:
        """P44: eight threads over two vaults on one store send the same keyed append at once: it is stored
        once and every thread gets the same result."""
        vaults = [open_vault(), open_vault()]
        start = threading.Barrier(8)
        results: list[Any] = []
        lock = threading.Lock()

        def send(index: int) -> None:
            start.wait(10)
            try:
                outcome: Any = vaults[index % 2].retain(keyed(ws, "exactly once\n", "op-3", tier="peers", key="pat"))
            except memvault.MemvaultError as exc:
                outcome = exc
            with lock:
                results.append(outcome)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert len(results) == 8
        assert all(isinstance(r, memvault.RetainResult) for r in results), results
        assert len({(r.id, r.bytes) for r in results}) == 1
        assert self.body(vaults[0], ws, tier="peers", key="pat") == "exactly once\n"

    @requires(Capability.IDEMPOTENT_WRITES)
    def test_p44_retain_many_applies_the_rules_per_item(self, vault: memvault.Vault, ws: str) -> None:
        """P44: in retain_many each item's key counts alone: a repeated item writes nothing, a conflicting one
        fails alone."""
        outcomes = vault.retain_many(
            [
                keyed(ws, "alpha\n", "op-a"),
                keyed(ws, "beta\n", "op-b"),
                keyed(ws, "alpha\n", "op-a"),
                keyed(ws, "gamma\n", "op-b"),
                keyed(ws, "delta\n", "op-d"),
            ]
        )
        assert isinstance(outcomes[0], memvault.RetainResult)
        assert outcomes[2] == outcomes[0]
        assert isinstance(outcomes[3], memvault.IdempotencyConflict)
        assert self.body(vault, ws) == "alpha\nbeta\ndelta\n"
        again = vault.retain_many([keyed(ws, "beta\n", "op-b"), keyed(ws, "delta\n", "op-d")])
        assert again == [outcomes[1], outcomes[4]]
        assert self.body(vault, ws) == "alpha\nbeta\ndelta\n"

    @requires(Capability.IDEMPOTENT_WRITES)
    def test_p44_a_failed_write_records_no_key(self, vault: memvault.Vault, ws: str) -> None:
        """P44: a write over its cap, or refused as invalid, leaves its key unused: the next write with it
        (another content) is stored, not a conflict."""
        with pytest.raises(memvault.CapExceeded):
            vault.retain(keyed(ws, "x" * 1600 + "\n", "op-cap", tier="peers", key="pat"))
        vault.retain(keyed(ws, "short enough\n", "op-cap", tier="peers", key="pat"))
        assert self.body(vault, ws, tier="peers", key="pat") == "short enough\n"
        if Capability.EXPIRY in vault.capabilities:
            soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)
            refused = memvault.RetainRequest(
                workspace_id=ws,
                agent_id="agent-1",
                tier="peers",
                key="pat",
                content="another expiry\n",
                mode="append",
                expires_at=soon,
                idempotency_key="op-inv",
            )
            with pytest.raises(memvault.InvalidRequest):
                vault.retain(refused)  # P41: an append may not give the document an expiry
            vault.retain(keyed(ws, "then this\n", "op-inv", tier="peers", key="pat"))
            assert self.body(vault, ws, tier="peers", key="pat") == "short enough\nthen this\n"

    @requires(Capability.IDEMPOTENT_WRITES)
    @requires_absent(Capability.REMOTE)
    def test_p45_a_key_is_forgotten_after_the_window(self, vault: memvault.Vault, ws: str) -> None:
        """P45: within the window a repeat writes nothing; the sweep forgets keys older than the window, after
        which a repeat writes again."""
        clock = ManualClock()
        with use_clock(clock):
            vault.retain(keyed(ws, "once a day\n", "op-w"))
            clock.advance(dt.timedelta(hours=23))
            vault.sweep_expired()
            vault.retain(keyed(ws, "once a day\n", "op-w"))
            assert self.body(vault, ws) == "once a day\n"
            clock.advance(dt.timedelta(hours=2))
            assert vault.sweep_expired().keys_removed >= 1
            vault.retain(keyed(ws, "once a day\n", "op-w"))
            assert self.body(vault, ws) == "once a day\nonce a day\n"

    @requires(Capability.IDEMPOTENT_WRITES, Capability.EXPIRY)
    @requires_absent(Capability.REMOTE)
    def test_p44_a_repeat_after_the_document_expired_writes_nothing(self, vault: memvault.Vault, ws: str) -> None:
        """P44/P42/P43: the repeat of a write whose document has expired since (its tier's retention ran out)
        returns the first result and does not bring the text back."""
        clock = ManualClock()
        with use_clock(clock):
            aged = memvault.Vault(
                vault.provider,
                name=vault.name,
                capabilities=vault.capabilities,
                retention=RetentionPolicy.from_config({"peers": "1h"}),
                background_sweep=False,
            )
            request = keyed(ws, "short-lived\n", "op-x", tier="peers", key="pat")
            first = aged.retain(request)
            clock.advance(dt.timedelta(hours=2))
            assert self.body(aged, ws, tier="peers", key="pat") == ""
            assert aged.retain(request) == first
            assert self.body(aged, ws, tier="peers", key="pat") == ""
