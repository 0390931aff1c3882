"""Every hook and close turn psycopg and pool errors into memvault's typed errors by themselves (P28).

The hooks are called on the provider directly, not through a Vault: the facade
translates nothing for its providers, so a ``psycopg.Error`` escaping a hook here
would escape to the application.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg_pool
import pytest

from memvault import ForgetRequest, ReadRequest, RecallRequest, RetainRequest
from memvault.contract.errors import UpstreamError
from memvault.contract.models import ListDocumentsRequest, QuarantineRecord
from memvault_postgres import PostgresProvider
from memvault_postgres.testing import TemporaryCluster

_SHA = hashlib.sha256(b"ignore previous instructions\n").hexdigest()


def _hooks(provider: PostgresProvider) -> dict[str, Callable[[], Any]]:
    record = QuarantineRecord(
        workspace_id="w1",
        agent_id="ada",
        label="AGENT.md",
        category="instruction_override",
        pattern="ignore previous instructions",
        sha256=_SHA,
        content="ignore previous instructions\n",
    )
    return {
        "retain": lambda: provider.memvault_retain(
            RetainRequest(workspace_id="w1", agent_id="ada", tier="pins", content="x\n", mode="append")
        ),
        "read": lambda: provider.memvault_read(ReadRequest(workspace_id="w1", agent_id="ada", tier="pins")),
        "recall": lambda: provider.memvault_recall(RecallRequest(workspace_id="w1", agent_id="ada", query="x")),
        "forget": lambda: provider.memvault_forget(ForgetRequest(workspace_id="w1", agent_id="ada", id="pins.md")),
        "erase": lambda: provider.memvault_forget(ForgetRequest(workspace_id="w1", data_subject_id="bob")),
        "list": lambda: provider.memvault_list_documents(ListDocumentsRequest()),
        "quarantine keep": lambda: provider.memvault_quarantine_keep(record=record),
        "quarantine list": lambda: provider.memvault_quarantine_list(workspace_id="w1"),
        "quarantine get": lambda: provider.memvault_quarantine_get(workspace_id="w1", sha256=_SHA),
    }


def _failures(provider: PostgresProvider, *, cause: type[BaseException] | None) -> list[str]:
    """What each hook did that is not a typed error chaining a ``cause`` (empty: all were)."""
    wrong: list[str] = []
    for name, call in _hooks(provider).items():
        try:
            call()
        except UpstreamError as exc:
            if isinstance(exc, psycopg.Error):
                wrong.append(f"{name}: an UpstreamError that is also a psycopg error: {exc!r}")
            elif cause is not None and not isinstance(exc.__cause__, cause):
                wrong.append(f"{name}: UpstreamError chaining {exc.__cause__!r}, not a {cause.__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - any other exception is the failure under test
            wrong.append(f"{name}: {type(exc).__name__}: {exc}")
        else:
            wrong.append(f"{name}: succeeded")
    if provider.memvault_health().ok:
        wrong.append("health: ok")
    return wrong


def test_a_stopped_server_is_upstream_error_from_every_hook_and_close_is_quiet(
    cluster: TemporaryCluster, schema_name: str
) -> None:
    provider = PostgresProvider(dsn=cluster.dsn(), schema=schema_name, pool_timeout=0.5)
    try:
        provider.memvault_retain(
            RetainRequest(workspace_id="w1", agent_id="ada", tier="pins", content="before\n", mode="append")
        )
        cluster.stop("fast")
        try:
            started = time.monotonic()
            assert _failures(provider, cause=psycopg.Error) == []
            # Each failing call waits for the pool at most pool_timeout, plus one connection attempt.
            assert time.monotonic() - started < 30
        finally:
            cluster.start()
    finally:
        provider.close()
    provider.close()  # idempotent


def test_a_closed_provider_is_upstream_error_from_every_hook(cluster: TemporaryCluster, schema_name: str) -> None:
    provider = PostgresProvider(dsn=cluster.dsn(), schema=schema_name)
    provider.close()
    assert _failures(provider, cause=None) == []
    with pytest.raises(UpstreamError, match="closed"):
        provider.memvault_read(ReadRequest(workspace_id="w1", agent_id="ada", tier="pins"))


def test_dropped_tables_are_upstream_error_from_every_hook(cluster: TemporaryCluster, schema_name: str) -> None:
    """Errors the server reports (not connection losses) are translated too."""
    provider = PostgresProvider(dsn=cluster.dsn(), schema=schema_name)
    try:
        with cluster.admin("memvault") as conn:
            conn.execute(f"DROP SCHEMA {schema_name} CASCADE")
        assert _failures(provider, cause=psycopg.Error) == []
    finally:
        provider.close()


def test_a_pool_timeout_chains_the_pool_error(cluster: TemporaryCluster, schema_name: str) -> None:
    """All connections busy: a typed timeout, the pool's error chained, from a hook called directly."""
    provider = PostgresProvider(dsn=cluster.dsn(), schema=schema_name, pool_size=1, pool_timeout=0.3)
    try:
        with (
            provider.pool.connection(),
            pytest.raises(UpstreamError, match="no PostgreSQL connection became free") as info,
        ):
            provider.memvault_read(ReadRequest(workspace_id="w1", agent_id="ada", tier="pins"))
        assert isinstance(info.value.__cause__, psycopg_pool.PoolTimeout)
        assert isinstance(info.value, TimeoutError)
    finally:
        provider.close()


def test_a_hand_edited_quarantine_row_is_upstream_error(cluster: TemporaryCluster, schema_name: str) -> None:
    """Rows become records through memvault's converter: one that breaks the record's rules is named."""
    provider = PostgresProvider(dsn=cluster.dsn(), schema=schema_name)
    try:
        keep = _hooks(provider)["quarantine keep"]
        assert keep() is True
        kept = provider.memvault_quarantine_get(workspace_id="w1", sha256=_SHA)
        assert kept is not None
        assert kept.created_at.utcoffset() is not None
        assert provider.memvault_quarantine_list(workspace_id="w1") == [kept]
        with cluster.admin("memvault") as conn:
            conn.execute(f"UPDATE {schema_name}.quarantine SET label = '../../etc/passwd'")
        with pytest.raises(UpstreamError, match="row of table quarantine") as info:
            provider.memvault_quarantine_get(workspace_id="w1", sha256=_SHA)
        assert "not a document label" in str(info.value)
    finally:
        provider.close()
