"""Health within its deadline (P25-P27), typed errors on connection loss (P28), recovery after a restart."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
import pytest
from pg_helpers import body, put

import memvault
from memvault.contract.errors import InvalidRequest, UpstreamError, UpstreamTimeout
from memvault_postgres.testing import TemporaryCluster

#: Scheduling slack on a loaded 2-core CI machine, on top of the 1 s deadline under test.
SLACK = 0.3


def _wait_healthy(vault: memvault.Vault) -> memvault.HealthStatus:
    deadline = time.monotonic() + 15
    while not (status := vault.health()).ok and time.monotonic() < deadline:
        time.sleep(0.2)
    return status


def _postmaster(cluster: TemporaryCluster) -> int:
    return int((cluster.data_dir / "postmaster.pid").read_text().split()[0])


def _children(postmaster: int) -> list[int]:
    """Every process the postmaster started."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == postmaster:
            pids.append(int(stat.parent.name))
    return pids


@contextmanager
def frozen_server(cluster: TemporaryCluster) -> Iterator[None]:
    """The server hangs: every process of it stopped (SIGSTOP), resumed on exit.

    The postmaster stops first, so it forks no backend while its children are
    listed and stopped; a backend that ended meanwhile needs no stopping.
    """
    stopped: list[int] = []

    def resume() -> None:
        for pid in stopped:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    # A body that hangs on the frozen server must fail its timing assertions, not hang the session.
    watchdog = threading.Timer(15.0, resume)
    watchdog.start()
    try:
        postmaster = _postmaster(cluster)
        os.kill(postmaster, signal.SIGSTOP)
        stopped.append(postmaster)
        for pid in _children(postmaster):  # listed once the postmaster can fork no more
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        yield
    finally:
        watchdog.cancel()
        resume()


def test_health_is_ok_on_a_live_server_and_leaves_nothing_behind_p25_p27(
    cluster: TemporaryCluster, vault: memvault.Vault, schema_name: str
) -> None:
    status = _wait_healthy(vault)
    assert status.ok, status.message
    assert status.message == ""
    assert status.checked_at.utcoffset() is not None
    with cluster.admin("memvault") as conn:
        assert conn.execute(f"SELECT count(*) FROM {schema_name}.probe").fetchone() == (0,)


def test_health_answers_within_the_remote_deadline_when_the_server_hangs_p26(
    cluster: TemporaryCluster, schema_name: str
) -> None:
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, health_timeout=1.0) as v:
        assert _wait_healthy(v).ok
        with frozen_server(cluster):
            started = time.monotonic()
            status = v.health()
            elapsed = time.monotonic() - started
        assert not status.ok
        assert elapsed < 1.0 + SLACK
        # Once the server answers again, so does health (the stuck probe was cancelled or rebuilt).
        status = _wait_healthy(v)
        assert status.ok, status.message


def test_the_provider_itself_answers_health_within_one_second_when_the_server_hangs(
    cluster: TemporaryCluster, schema_name: str
) -> None:
    """Not only the Vault's deadline: the provider's own probe gives up in time, with the timeout message."""
    from memvault_postgres import PostgresProvider

    provider = PostgresProvider(dsn=cluster.dsn(), schema=schema_name)
    try:
        with frozen_server(cluster):
            started = time.monotonic()
            status = provider.memvault_health()
            assert time.monotonic() - started < 1.0 + SLACK
            # Closing does not wait for the probe stuck on the hung server.
            started = time.monotonic()
            provider.close()
            assert time.monotonic() - started < 4.0
        assert not status.ok
        assert status.message == "health check timeout"
    finally:
        provider.close()


def test_health_stays_within_its_deadline_when_the_pool_is_exhausted_p26(
    cluster: TemporaryCluster, schema_name: str
) -> None:
    with memvault.open(
        "postgres", dsn=cluster.dsn(), schema=schema_name, pool_size=1, pool_timeout=0.5, health_timeout=1.0
    ) as v:
        assert _wait_healthy(v).ok  # the probe's own connection exists before the pool is taken
        provider = v.provider
        taken = threading.Event()
        release = threading.Event()

        def hog() -> None:
            with provider.pool.connection():  # type: ignore[attr-defined]
                taken.set()
                release.wait(10)

        t = threading.Thread(target=hog)
        t.start()
        try:
            assert taken.wait(5)
            started = time.monotonic()
            status = v.health()
            assert time.monotonic() - started < 1.0 + SLACK
            assert status.ok, status.message
            with pytest.raises(UpstreamTimeout, match="pool_size"):
                put(v, "no connection free\n")
        finally:
            release.set()
            t.join()
        put(v, "a connection is free again\n")


def test_a_stopped_server_gives_typed_errors_and_distinct_health_then_recovers_p27_p28(
    cluster: TemporaryCluster, schema_name: str
) -> None:
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off", pool_timeout=1.0) as v:
        _outage_and_recovery(cluster, v)


def _outage_and_recovery(cluster: TemporaryCluster, vault: memvault.Vault) -> None:
    put(vault, "before the outage\n")
    cluster.stop("fast")
    try:
        status = vault.health()
        assert not status.ok
        assert "refused" in status.message or "cannot reach" in status.message
        for action in (lambda: put(vault, "during\n"), lambda: body(vault)):
            with pytest.raises(UpstreamError, match="cannot connect|lost the connection") as info:
                action()
            assert not isinstance(info.value, psycopg.Error)
            assert isinstance(info.value.__cause__, (psycopg.Error, Exception))
    finally:
        cluster.start()
    deadline = time.monotonic() + 15
    while True:
        try:
            put(vault, "after the outage\n")
            break
        except UpstreamError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert body(vault).startswith("before the outage\n")
    assert body(vault).endswith("after the outage\n")
    assert _wait_healthy(vault).ok


def test_the_pool_recovers_after_a_server_restart_under_load_without_losing_an_acknowledged_write(
    cluster: TemporaryCluster, schema_name: str
) -> None:
    """4 writer threads append unique tokens while the server restarts: errors during the outage are
    typed, every acknowledged append is in the document exactly once, and writes succeed afterwards."""
    acked: list[str] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()

    with memvault.open(
        "postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off", pool_size=4, pool_timeout=2.0
    ) as v:

        def writer(w: int) -> None:
            k = 0
            while not stop.is_set() and k < 2000:
                token = f"<w{w}-{k}>"
                try:
                    put(v, token, tier="daily", key="2026-03-03")
                    with lock:
                        acked.append(token)
                except UpstreamError:
                    time.sleep(0.05)  # typed: the outage; the token may or may not have landed
                except BaseException as exc:  # noqa: BLE001 - anything else is a test failure
                    failures.append(exc)
                    return
                k += 1

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        before = len(acked)
        cluster.restart("fast", down_for=0.5)
        after_restart = time.monotonic()
        while time.monotonic() - after_restart < 10 and len(acked) < before + 40:
            time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join(30)
        assert not failures, failures
        assert before > 0
        assert len(acked) >= before + 40, "writes did not resume after the restart"
        text = body(v, tier="daily", key="2026-03-03")
    for token in acked:
        assert text.count(token) == 1, token


def test_a_bad_dsn_is_invalid_request_naming_the_setting(cluster: TemporaryCluster) -> None:
    with pytest.raises(InvalidRequest) as info:
        memvault.open("postgres", dsn="host=127.0.0.1 dbname", schema="x_bad")
    assert info.value.field == "dsn" or "dsn" in str(info.value)


def test_an_unknown_role_is_upstream_error_naming_the_server(cluster: TemporaryCluster) -> None:
    with pytest.raises(UpstreamError, match=f"127.0.0.1:{cluster.port}"):
        memvault.open("postgres", dsn=cluster.dsn(user="nobody_here"))


def test_a_bad_schema_name_is_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="schema"):
        memvault.open("postgres", dsn="host=127.0.0.1", schema="Bad-Name")
