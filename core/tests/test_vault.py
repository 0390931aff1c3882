"""The Vault facade: verbs over the memory provider, error wrapping, health deadline, async."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from typing import Any

import pytest

import memvault
from memvault.contract.errors import InvalidRequest, PluginError, UpstreamError, UpstreamTimeout


def retain(vault: memvault.Vault, content: str, **overrides: Any) -> memvault.RetainResult:
    fields: dict[str, Any] = {"workspace_id": "w1", "agent_id": "a1", "tier": "AGENT", "mode": "append"}
    fields.update(overrides)
    return vault.retain(memvault.RetainRequest(content=content, **fields))


def read(vault: memvault.Vault, **overrides: Any) -> memvault.ReadResult:
    fields: dict[str, Any] = {"workspace_id": "w1", "agent_id": "a1", "tier": "AGENT"}
    fields.update(overrides)
    return vault.read(memvault.ReadRequest(**fields))


def test_p6_append_concatenates_raw_bytes(vault: memvault.Vault) -> None:
    retain(vault, "one")
    result = retain(vault, "two")
    assert read(vault).content == "onetwo"
    assert (result.id, result.bytes) == ("AGENT.md", 6)


def test_p5_replace_overwrites(vault: memvault.Vault) -> None:
    retain(vault, "old")
    retain(vault, "new", mode="replace")
    assert read(vault).content == "new"


def test_p9_over_cap_leaves_the_document_unchanged(vault: memvault.Vault) -> None:
    retain(vault, "x" * 1400, tier="PERSONA")
    with pytest.raises(memvault.CapExceeded) as info:
        retain(vault, "y" * 101, tier="PERSONA")
    assert (info.value.current, info.value.projected, info.value.cap) == (1400, 1501, 1500)
    assert read(vault, tier="PERSONA").content == "x" * 1400


def test_p9_bytes_not_characters_count_against_the_cap(vault: memvault.Vault) -> None:
    with pytest.raises(memvault.CapExceeded):
        retain(vault, "é" * 751, tier="PERSONA")  # 1502 bytes, 751 characters


def test_p9_result_carries_warning_at_80_percent(vault: memvault.Vault) -> None:
    assert retain(vault, "x" * 1199, tier="PERSONA").warning == ""
    assert retain(vault, "x", tier="PERSONA").warning == "PERSONA document uses 1200 of 1500 bytes, 80%"


def test_p7_daily_result_names_the_real_date(vault: memvault.Vault) -> None:
    result = retain(vault, "standup", tier="daily")
    assert result.id == f"daily/{memvault.contract.models.today_utc()}.md"


def test_p21_missing_document_reads_empty(vault: memvault.Vault) -> None:
    result = read(vault, tier="peers", key="nobody")
    assert (result.id, result.content, result.quarantined) == ("peers/nobody.md", "", False)


def test_p23_forget_twice_removes_zero(vault: memvault.Vault) -> None:
    retain(vault, "secret sauce")
    forget = memvault.ForgetRequest(workspace_id="w1", agent_id="a1", id="AGENT.md")
    assert vault.forget(forget).removed == 1
    assert vault.forget(forget).removed == 0
    assert read(vault).content == ""
    assert vault.recall(memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="sauce")).hits == []


def test_p24_forget_by_subject_stays_in_its_workspace(vault: memvault.Vault) -> None:
    retain(vault, "alice likes tea", data_subject_id="alice")
    retain(vault, "alice likes tea", data_subject_id="alice", tier="pins", agent_id="a2")
    retain(vault, "alice likes tea", data_subject_id="alice", workspace_id="w2")
    removed = vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id="alice"))
    assert removed.removed == 2
    assert read(vault, workspace_id="w2").content == "alice likes tea"


def test_p3_recall_never_crosses_partitions(vault: memvault.Vault) -> None:
    retain(vault, "shared words here")
    retain(vault, "shared words here", agent_id="a2")
    retain(vault, "shared words here", workspace_id="w2")
    hits = vault.recall(memvault.RecallRequest(workspace_id="w1", agent_id="a2", query="shared words")).hits
    assert len(hits) == 1


def test_p17_phrase_lines_rank_above_term_lines(vault: memvault.Vault) -> None:
    retain(vault, "metric units rock\nunits of metric\nnothing here\nthe metric units again\n")
    hits = vault.recall(memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="Metric Units")).hits
    assert sorted(h.line for h in hits[:2]) == [1, 4]
    assert hits[2].line == 2
    assert hits[0].score > 0.5 > hits[2].score
    assert all(h.line != 3 for h in hits)


def test_p17_question_finds_the_answer_by_its_terms(vault: memvault.Vault) -> None:
    retain(vault, "Prefers metric units.\nLives in Lisbon.\n")
    hits = vault.recall(
        memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="Which units does the user prefer?")
    ).hits
    assert hits[0].snippet == "Prefers metric units."


def test_vault_rejects_a_request_of_the_wrong_type(vault: memvault.Vault) -> None:
    with pytest.raises(InvalidRequest, match="expected a memvault.RecallRequest"):
        vault.recall({"query": "x"})  # type: ignore[arg-type]


class _Broken:
    """A provider whose storage fails in every way a real one can."""

    def __init__(self, exc: Exception, result: object = None) -> None:
        self.exc = exc
        self.result = result

    @memvault.hookimpl
    def memvault_retain(self, request: memvault.RetainRequest) -> memvault.RetainResult:
        raise self.exc

    @memvault.hookimpl
    def memvault_recall(self, request: memvault.RecallRequest) -> object:
        return self.result

    @memvault.hookimpl
    def memvault_read(self, request: memvault.ReadRequest) -> memvault.ReadResult:
        raise self.exc

    @memvault.hookimpl
    def memvault_forget(self, request: memvault.ForgetRequest) -> memvault.ForgetResult:
        raise self.exc

    @memvault.hookimpl
    def memvault_health(self) -> memvault.HealthStatus:
        raise self.exc


_REQ = memvault.RetainRequest(workspace_id="w", agent_id="a", tier="AGENT", content="x", mode="append")


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        # A provider translates its own library's exceptions: one that lets sqlite3 escape has a bug.
        (sqlite3.OperationalError("database is locked"), PluginError),
        (OSError(28, "No space left on device"), UpstreamError),
        (TimeoutError("slow disk"), UpstreamTimeout),
        (KeyError("bug"), PluginError),
    ],
)
def test_p28_raw_exceptions_are_wrapped_with_cause(raised: Exception, expected: type[Exception]) -> None:
    vault = memvault.Vault(_Broken(raised), name="broken")
    with pytest.raises(expected) as info:
        vault.retain(_REQ)
    assert info.value.__cause__ is raised
    assert "broken" in str(info.value)


def test_provider_returning_the_wrong_type_is_a_plugin_error() -> None:
    vault = memvault.Vault(_Broken(OSError(), result={"hits": []}), name="broken")
    with pytest.raises(PluginError, match="returned dict from recall, expected RecallResult"):
        vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a", query="q"))


def test_provider_missing_verbs_is_refused_at_construction() -> None:
    class Partial:
        @memvault.hookimpl
        def memvault_health(self) -> memvault.HealthStatus:
            return memvault.HealthStatus(ok=True)

    with pytest.raises(PluginError, match="does not implement memvault_retain, memvault_recall"):
        memvault.Vault(Partial(), name="partial")


def test_misspelt_hook_fails_loudly() -> None:
    class Misspelt(_Broken):
        @memvault.hookimpl
        def memvault_retian(self, request: object) -> None:
            raise AssertionError("never called")

    with pytest.raises(PluginError, match="memvault_retian"):
        memvault.Vault(Misspelt(OSError()), name="typo")


def test_p27_health_reports_instead_of_raising() -> None:
    status = memvault.Vault(_Broken(OSError("disk gone")), name="b").health()
    assert status.ok is False
    assert "disk gone" in status.message
    assert status.checked_at.tzinfo is not None


class _Hanging(_Broken):
    def __init__(self) -> None:
        super().__init__(OSError())
        self.release = threading.Event()

    @memvault.hookimpl
    def memvault_health(self) -> memvault.HealthStatus:
        self.release.wait(10)
        return memvault.HealthStatus(ok=True)


@pytest.mark.parametrize(("capabilities", "deadline"), [((), 0.2), (("remote",), 1.0)])
def test_p26_health_returns_by_its_deadline_when_the_provider_hangs(
    capabilities: tuple[str, ...], deadline: float
) -> None:
    provider = _Hanging()
    vault = memvault.Vault(provider, name="hang", capabilities=capabilities)
    started = time.monotonic()
    status = vault.health()
    elapsed = time.monotonic() - started
    provider.release.set()
    assert status.ok is False
    assert status.message == "health check timeout"
    assert deadline <= elapsed < deadline + 0.15


def test_p25_healthy_provider_reports_ok_with_empty_message(vault: memvault.Vault) -> None:
    status = vault.health()
    assert (status.ok, status.message) == (True, "")


def test_p28_many_threads_append_without_loss(vault: memvault.Vault) -> None:
    def worker(n: int) -> None:
        for i in range(25):
            retain(vault, f"[{n}:{i}]", tier="pins")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    body = read(vault, tier="pins").content
    assert sorted(body.replace("]", "]\n").split()) == sorted(f"[{n}:{i}]" for n in range(8) for i in range(25))


def test_async_vault_runs_the_same_verbs() -> None:
    async def main() -> tuple[int, bool]:
        async with memvault.open_async("memory") as avault:
            await avault.retain(
                memvault.RetainRequest(workspace_id="w", agent_id="a", tier="pins", content="async tea", mode="append")
            )
            hits = await avault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a", query="tea"))
            status = await avault.health()
            return len(hits.hits), status.ok

    assert asyncio.run(main()) == (1, True)


def test_close_is_idempotent_and_calls_the_provider() -> None:
    closed: list[int] = []

    class Closable(_Broken):
        def close(self) -> None:
            closed.append(1)

    vault = memvault.Vault(Closable(OSError()), name="c")
    with vault:
        pass
    vault.close()
    assert closed == [1]


class _NoCascade:
    """A provider without cascade_forget whose NotSupported does not say who it is."""

    def __init__(
        self, message: str = "forget by data_subject_id is not supported; erase by document id instead"
    ) -> None:
        from memvault.providers.memory import MemoryProvider

        self._inner = MemoryProvider()
        self.message = message

    @memvault.hookimpl
    def memvault_retain(self, request: memvault.RetainRequest) -> memvault.RetainResult:
        return self._inner.memvault_retain(request)

    @memvault.hookimpl
    def memvault_recall(self, request: memvault.RecallRequest) -> memvault.RecallResult:
        return self._inner.memvault_recall(request)

    @memvault.hookimpl
    def memvault_read(self, request: memvault.ReadRequest) -> memvault.ReadResult:
        return self._inner.memvault_read(request)

    @memvault.hookimpl
    def memvault_forget(self, request: memvault.ForgetRequest) -> memvault.ForgetResult:
        if request.data_subject_id:
            raise memvault.NotSupported(self.message)
        return self._inner.memvault_forget(request)

    @memvault.hookimpl
    def memvault_health(self) -> memvault.HealthStatus:
        return memvault.HealthStatus(ok=True)


def test_p24_not_supported_names_the_registered_provider() -> None:
    """P24: the Vault adds the provider's registered name to a NotSupported that lacks it, cause chained."""
    vault = memvault.Vault(_NoCascade(), name="acme-store")
    with pytest.raises(memvault.NotSupported) as caught:
        vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id="subject-1"))
    message = str(caught.value)
    assert message.startswith("provider 'acme-store': ")
    assert "erase by document id instead" in message
    assert isinstance(caught.value.__cause__, memvault.NotSupported)


def test_p24_not_supported_that_names_the_provider_is_passed_through() -> None:
    """A message already naming the provider is not prefixed twice; other errors are untouched."""
    vault = memvault.Vault(_NoCascade("provider 'acme-store' cannot erase by subject"), name="acme-store")
    with pytest.raises(memvault.NotSupported) as caught:
        vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id="subject-1"))
    assert str(caught.value) == "provider 'acme-store' cannot erase by subject"
    assert caught.value.__cause__ is None
    with pytest.raises(memvault.CapExceeded) as capped:
        vault.retain(
            memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="PERSONA", content="x" * 1501, mode="append")
        )
    assert "acme-store" not in str(capped.value)
