"""The versioned schema: created on first open, shared by concurrent openers, a newer one refused."""

from __future__ import annotations

import threading

import pytest
from pg_helpers import body, put

import memvault
from memvault.contract.errors import InvalidRequest, UpstreamError
from memvault_postgres.schema import SCHEMA_VERSION
from memvault_postgres.testing import TemporaryCluster


def test_first_open_creates_the_schema_at_the_current_version(cluster: TemporaryCluster, schema_name: str) -> None:
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name):
        pass
    with cluster.admin("memvault") as conn:
        row = conn.execute(f"SELECT value FROM {schema_name}.meta WHERE key = 'schema_version'").fetchone()
    assert row == (str(SCHEMA_VERSION),)


def test_concurrent_first_opens_create_one_schema(cluster: TemporaryCluster, schema_name: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def opener() -> None:
        barrier.wait(10)
        try:
            with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as v:
                put(v, "x\n", tier="daily", key="2026-01-01")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as v:
        assert body(v, tier="daily", key="2026-01-01") == "x\n" * 4


def test_a_newer_schema_is_refused_with_a_clear_error(cluster: TemporaryCluster, schema_name: str) -> None:
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as v:
        put(v, "kept\n")
        with cluster.admin("memvault") as conn:
            conn.execute(f"UPDATE {schema_name}.meta SET value = '{SCHEMA_VERSION + 1}' WHERE key = 'schema_version'")
        status = v.health()
        assert not status.ok
        assert "newer" in status.message
    with pytest.raises(UpstreamError, match="upgrade memvault-postgres"):
        memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name)


def test_a_schema_of_another_application_is_refused(cluster: TemporaryCluster, schema_name: str) -> None:
    with cluster.admin("memvault") as conn:
        conn.execute(f"CREATE SCHEMA {schema_name} AUTHORIZATION memvault")
        conn.execute(f"CREATE TABLE {schema_name}.invoices (id int)")
    with pytest.raises(InvalidRequest, match="invoices"):
        memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name)
