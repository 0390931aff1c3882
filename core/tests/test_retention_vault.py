"""The vault's side of memory over time (P41-P45): capability checks, the policy it applies to each write,
its sweep (on demand and in the background) and memvault.toml's [retention] and [idempotency] tables."""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import memvault
from memvault import IdempotencyConflict, InvalidRequest, NotSupported, ReadRequest, RetainRequest
from memvault.config import load_config
from memvault.contract.clock import ManualClock, use_clock
from memvault.contract.models import Capability, HealthStatus, ListDocumentsRequest
from memvault.contract.retention import RetentionPolicy, SweepRequest, SweepResult
from memvault.providers.memory import MemoryProvider
from memvault.vault import Vault, _Sweeper

pytestmark = pytest.mark.usefixtures("words_only")

HOUR = dt.timedelta(hours=1)


@pytest.fixture
def words_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMVAULT_EMBEDDER", "off")


def _retain(**kw: Any) -> RetainRequest:
    fields: dict[str, Any] = {"workspace_id": "w", "agent_id": "a", "tier": "pins", "mode": "append"}
    fields["content"] = "a fact\n"
    fields.update(kw)
    return RetainRequest(**fields)


def _read(vault: Vault, tier: str = "pins", key: str = "") -> str:
    return vault.read(ReadRequest(workspace_id="w", agent_id="a", tier=tier, key=key)).content


class _Plain:
    """A provider with the five verbs and no capability for time: expiries and keys must be refused."""

    def __init__(self) -> None:
        self.inner = MemoryProvider()
        self.retains: list[RetainRequest] = []

    @memvault.hookimpl
    def memvault_retain(self, request: RetainRequest) -> Any:
        self.retains.append(request)
        return self.inner.memvault_retain(request)

    @memvault.hookimpl
    def memvault_recall(self, request: Any) -> Any:
        return self.inner.memvault_recall(request)

    @memvault.hookimpl
    def memvault_read(self, request: Any) -> Any:
        return self.inner.memvault_read(request)

    @memvault.hookimpl
    def memvault_forget(self, request: Any) -> Any:
        return self.inner.memvault_forget(request)

    @memvault.hookimpl
    def memvault_health(self) -> HealthStatus:
        return HealthStatus(ok=True)


def test_expiry_key_and_policy_on_a_provider_without_the_capability_are_refused_naming_it() -> None:
    """P41, P43, P44: never silently kept for ever, never silently non-idempotent."""
    plain = _Plain()
    vault = Vault(plain, name="plain")
    with pytest.raises(NotSupported, match="'plain'.*expiry"):
        vault.retain(_retain(expires_at=dt.datetime.now(dt.timezone.utc) + HOUR))
    with pytest.raises(NotSupported, match="'plain'.*idempotent_writes"):
        vault.retain(_retain(idempotency_key="k1"))
    outcomes = vault.retain_many([_retain(idempotency_key="k2"), _retain(content="kept\n")])
    assert isinstance(outcomes[0], NotSupported)
    assert not isinstance(outcomes[1], Exception)
    assert [r.content for r in plain.retains] == ["kept\n"]
    with pytest.raises(NotSupported, match="'plain'.*expiry"):
        Vault(_Plain(), name="plain", retention=RetentionPolicy(tiers={"daily": dt.timedelta(days=1)}))
    with pytest.raises(NotSupported, match="'plain'"):
        vault.sweep_expired()


def test_a_past_expiry_is_refused_and_nothing_written() -> None:
    """P41."""
    clock = ManualClock()
    with use_clock(clock), memvault.open("memory", scanner="off") as vault:
        for when in (clock(), clock() - HOUR):
            with pytest.raises(InvalidRequest, match="in the past") as caught:
                vault.retain(_retain(expires_at=when))
            assert caught.value.field == "expires_at"
        assert _read(vault) == ""


def test_the_vault_sets_each_writes_retention_from_its_policy_and_a_caller_cannot_override_it() -> None:
    """P43: the workspace override wins; a caller's own retention is replaced by the vault's."""
    clock = ManualClock()
    policy = {"daily": "2d", "workspaces": {"short": {"daily": "1h"}, "keep": {"daily": "off"}}}
    with use_clock(clock), memvault.open("memory", scanner="off", retention=policy) as vault:
        for workspace in ("w", "short", "keep"):
            vault.retain(
                _retain(workspace_id=workspace, tier="daily", key="2026-01-01", retention=dt.timedelta(days=900))
            )
        clock.advance(2 * HOUR)
        alive = {d.workspace_id for d in vault.list_documents(ListDocumentsRequest()).documents}
        assert alive == {"w", "keep"}
        clock.advance(dt.timedelta(days=2))
        alive = {d.workspace_id for d in vault.list_documents(ListDocumentsRequest()).documents}
        assert alive == {"keep"}


def test_sweep_expired_loops_until_done_and_reports_progress() -> None:
    """P43: Vault.sweep_expired pages through the provider's batches; a dry run removes nothing."""
    clock = ManualClock()
    with use_clock(clock), memvault.open("memory", scanner="off") as vault:
        for n in range(7):
            vault.retain(_retain(tier="peers", key=f"p{n}", expires_at=clock() + HOUR))
        clock.advance(2 * HOUR)
        assert vault.health().retention_overdue == 7
        dry = vault.sweep_expired(dry_run=True)
        assert len(dry.documents) == 7
        assert dry.dry_run
        assert vault.health().retention_overdue == 7
        seen: list[int] = []
        report = vault.sweep_expired(batch=3, progress=seen.append)
        assert sorted(d.label for d in report.documents) == [f"peers/p{n}.md" for n in range(7)]
        assert seen == [3, 6, 7]
        assert vault.health().retention_overdue == 0
        assert vault.sweep_expired().documents == []


def test_idempotency_keys_are_forgotten_after_the_window() -> None:
    """P45: the sweep forgets keys older than the vault's window; a repeat then writes again."""
    clock = ManualClock()
    with use_clock(clock), memvault.open("memory", scanner="off", idempotency={"window": "2h"}) as vault:
        vault.retain(_retain(idempotency_key="k1"))
        clock.advance(HOUR)
        assert vault.sweep_expired().keys_removed == 0
        vault.retain(_retain(idempotency_key="k1"))
        assert _read(vault) == "a fact\n"
        with pytest.raises(IdempotencyConflict):
            vault.retain(_retain(idempotency_key="k1", content="other\n"))
        clock.advance(2 * HOUR)
        assert vault.sweep_expired().keys_removed == 1
        vault.retain(_retain(idempotency_key="k1"))
        assert _read(vault) == "a fact\na fact\n"


class _Counting(MemoryProvider):
    def __init__(self) -> None:
        super().__init__()
        self.sweeps = 0
        self.swept = threading.Event()

    @memvault.hookimpl
    def memvault_sweep_expired(self, request: SweepRequest) -> SweepResult:
        self.sweeps += 1
        self.swept.set()
        return super().memvault_sweep_expired(request)


def test_the_background_sweeper_runs_every_interval_and_stops_on_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """P43: a daemon thread per vault, stopped by close; none for short-lived commands (background_sweep=False)."""
    monkeypatch.setattr(_Sweeper, "FIRST_DELAY", 0.05)
    provider = _Counting()
    caps = MemoryProvider.capabilities
    vault = Vault(provider, name="memory", capabilities=caps, sweep_interval=dt.timedelta(seconds=1))
    try:
        assert provider.swept.wait(10), "the background sweep never ran"
        assert vault._sweeper is not None
        assert vault._sweeper.running
    finally:
        vault.close()
    assert not vault._sweeper.running
    count = provider.sweeps
    time.sleep(0.2)
    assert provider.sweeps == count
    quiet = _Counting()
    Vault(quiet, name="memory", capabilities=caps, background_sweep=False, sweep_interval=dt.timedelta(seconds=1))
    off = _Counting()
    Vault(off, name="memory", capabilities=caps, sweep_interval=None)
    remote = _Counting()
    Vault(remote, name="memory", capabilities=caps | {Capability.REMOTE}, sweep_interval=dt.timedelta(seconds=1))
    time.sleep(0.3)
    assert (quiet.sweeps, off.sweeps, remote.sweeps) == (0, 0, 0)


def test_a_provider_declaring_expiry_must_implement_the_sweep() -> None:
    """A local provider must; a remote client need not (its service sweeps), and runs no sweeper."""
    with pytest.raises(memvault.PluginError, match="memvault_sweep_expired"):
        Vault(_Plain(), name="plain", capabilities={Capability.EXPIRY})
    client = Vault(_Plain(), name="client", capabilities={Capability.EXPIRY, Capability.REMOTE})
    assert client._sweeper is None


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "memvault.toml"
    path.write_text(text)
    return path


def test_config_reads_retention_and_idempotency(tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        'provider = "memory"\n[retention]\ndaily = "90d"\nsweep_interval = "off"\n'
        '[retention.workspaces.acme]\ndaily = "30d"\n[idempotency]\nwindow = "2h"\n',
    )
    with memvault.open_from_config(path, scanner="off") as vault:
        assert vault.retention.for_("acme", "daily") == dt.timedelta(days=30)
        assert vault.retention.for_("x", "daily") == dt.timedelta(days=90)
        assert vault.idempotency_window == 2 * HOUR
        assert vault.sweep_interval is None
        assert vault._sweeper is None


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[retention]\ndaily = "90"\n', "retention.daily"),
        ('[retention]\ndialy = "90d"\n', "retention.dialy"),
        ('[retention]\nsweep_interval = "hourly"\n', "retention.sweep_interval"),
        ('[retention.workspaces.acme]\npeers = "1 year"\n', "retention.workspaces.acme.peers"),
        ('[idempotency]\nwindow = "off"\n', "idempotency.window"),
        ('[idempotency]\nwindows = "1h"\n', "idempotency.windows"),
    ],
)
def test_config_errors_name_the_bad_key(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        load_config(_config(tmp_path, text))
    assert caught.value.field == field
    assert field.rsplit(".", 1)[-1] in str(caught.value)


def test_the_async_vault_sweeps_too() -> None:
    """P43: AsyncVault.sweep_expired awaits the same sweep."""
    import asyncio

    clock = ManualClock()
    with use_clock(clock):
        async_vault = memvault.open_async("memory", scanner="off")
        asyncio.run(async_vault.retain(_retain(expires_at=clock() + HOUR)))
        clock.advance(2 * HOUR)
        report = asyncio.run(async_vault.sweep_expired())
        assert [d.label for d in report.documents] == ["pins.md"]
        asyncio.run(async_vault.aclose())


def test_a_replayed_turn_capture_is_stored_once() -> None:
    """P44: the default capture keys its daily append by the slot and the phase's operation id, so the same
    turn.completed delivered twice (a retry after a lost answer, another replica) writes one line."""
    from memvault.contract.lifecycle import LifecycleContext, SlotOptions

    with memvault.open("memory", scanner="off") as vault:

        def ctx(operation_id: str) -> LifecycleContext:
            return LifecycleContext(
                vault=vault,
                slot="m",
                description="",
                scope_key="a",
                workspace_id="w",
                agent_id="a",
                session_id="s",
                phase="turn.completed",
                operation_id=operation_id,
                turn=1,
                input_text="where do I park?",
                output_text="level 2",
                options=SlotOptions(capture=True),
            )

        for operation in ("op-1", "op-1", "op-2"):
            vault.capture_turn_completed(ctx(operation))
        assert _read(vault, "daily").count("level 2") == 2
        time.sleep(1.1)  # the line carries the time: a later replay is another request under the same key
        vault.capture_turn_completed(ctx("op-1"))
        assert _read(vault, "daily").count("level 2") == 2


def test_a_vault_refused_for_its_policy_leaves_no_embedding_worker_behind() -> None:
    """A policy over a provider without expiry fails the vault after its embedding worker started: the worker
    is stopped, not left running for a vault nobody holds."""
    import numpy as np

    class Ones:
        model_id = "ones-1"
        dimensions = 4

        def embed(self, texts: Any) -> Any:
            return np.ones((len(texts), self.dimensions), dtype=np.float32)

    caps = MemoryProvider.capabilities - {Capability.EXPIRY}
    policy = RetentionPolicy(tiers={"daily": dt.timedelta(days=1)})
    before = set(threading.enumerate())
    with pytest.raises(NotSupported):
        Vault(MemoryProvider(), name="m", capabilities=caps, embedder=Ones(), retention=policy)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [t for t in threading.enumerate() if t not in before and t.name.startswith("memvault-embed-")]
        if not left:
            break
        time.sleep(0.05)
    assert left == []
