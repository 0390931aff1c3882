"""The background retry of a pending erasure (P24): once the transaction that kept it pending ends, the
erasure finishes by itself, without another forget, write or restart; the retry never rewrites a shard
for nothing, holds writers up no longer than its bounded lock wait, defers to a retry of another process
and stops when the provider closes."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import pytest
from pg_helpers import body, no_trace, old_snapshot, one, put, recorded, until_erasures_finished

import memvault
from memvault_postgres import retry
from memvault_postgres.provider import ERASE_RETRY_LOCK_WAIT
from memvault_postgres.testing import TemporaryCluster

#: A short first pause for the tests (the default is 2 s); it doubles after each round that finds the
#: erasure still waiting. A short erase_lock_timeout too, so a forget answers pending in well under a second.
FAST: dict[str, Any] = {"erase_retry_interval": 0.2, "erase_lock_timeout": 0.3}
#: Seconds a pending erasure may take to finish once nothing holds it any more.
DEADLINE = 15.0
#: The name of the retry thread (one per provider).
THREAD = "memvault-postgres-erase-retry"


def _open(cluster: TemporaryCluster, schema_name: str, **settings: Any) -> memvault.Vault:
    return memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off", **settings)


def _shard(cluster: TemporaryCluster, schema_name: str) -> str:
    """The documents shard of partition w1/a1 (every test writes there)."""
    return str(
        one(cluster, f"SELECT c.relname FROM {schema_name}.documents AS d JOIN pg_class AS c ON c.oid = d.tableoid")
    )


def _filenode(cluster: TemporaryCluster, schema_name: str, relation: str) -> int:
    """The relation's file: every ``VACUUM FULL`` writes a new one."""
    return int(one(cluster, "SELECT relfilenode FROM pg_class WHERE oid = %s::regclass", f"{schema_name}.{relation}"))


def _retry_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD)]


def _retry_ends() -> None:
    """The retry thread ends soon after the erasure finished (its last round finds nothing left)."""
    start = time.monotonic()
    while _retry_threads():
        assert time.monotonic() < start + 2.0, "the retry thread kept running with nothing left to do"
        time.sleep(0.02)


def _forget_pending(vault: memvault.Vault, subject: str) -> None:
    result = vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id=subject))
    assert (result.removed, result.pending) == (1, True)


def test_a_pending_erasure_finishes_by_itself_once_the_old_transaction_ends_p24(
    cluster: TemporaryCluster, schema_name: str
) -> None:
    secret = f"retrytext{uuid.uuid4().hex}"
    with _open(cluster, schema_name, **FAST) as vault:
        put(vault, f"the secret is {secret}\n", subject="subject-r")
        shard = _shard(cluster, schema_name)
        with old_snapshot(cluster) as holder:
            _forget_pending(vault, "subject-r")
            assert vault.health().pending_erasures == 1
            assert body(vault) == ""
            before = _filenode(cluster, schema_name, shard)
            time.sleep(1.5)  # rounds at about 0.2, 0.6 and 1.4 s: the old snapshot still sees the rows
            # Nothing rewritten for nothing: the retry saw that VACUUM could not drop the rows yet.
            assert _filenode(cluster, schema_name, shard) == before
            assert recorded(cluster, schema_name) > 0
            holder.execute("ROLLBACK")
            took = until_erasures_finished(cluster, schema_name)  # no forget, no write, no restart meanwhile
        print(f"finished {took:.2f} s after the old transaction ended")
        assert _filenode(cluster, schema_name, shard) != before
        assert vault.health().pending_erasures == 0
        no_trace(cluster, schema_name, secret)
        _retry_ends()


def test_closing_the_provider_stops_its_retry_and_the_record_stays_for_the_next_open_p24(
    cluster: TemporaryCluster, schema_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret = f"closedtext{uuid.uuid4().hex}"
    vault = _open(cluster, schema_name, **FAST)
    put(vault, f"the secret is {secret}\n", subject="subject-c")
    with old_snapshot(cluster) as holder:
        _forget_pending(vault, "subject-c")
        assert len(_retry_threads()) == 1
        time.sleep(0.7)  # a round or two in
        caplog.clear()
        caplog.set_level(logging.DEBUG)
        start = time.monotonic()
        vault.close()
        closed_in = time.monotonic() - start
        assert _retry_threads() == []
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
        holder.execute("ROLLBACK")
    print(f"closed in {closed_in:.3f} s")
    assert closed_in < 1.0
    time.sleep(0.5)
    assert recorded(cluster, schema_name) > 0  # durable, and nobody retries it any more
    with _open(cluster, schema_name, **FAST) as again:  # the next open finishes it
        assert recorded(cluster, schema_name) == 0
        assert again.health().pending_erasures == 0
    no_trace(cluster, schema_name, secret)


def test_the_retry_holds_writers_up_no_longer_than_its_lock_wait_p24(
    cluster: TemporaryCluster, schema_name: str
) -> None:
    """A process that never forgot anything starts retrying once its health sees the pending erasure;
    while a transaction holds a lock on the shard (it started after the erasure, so the rows could go),
    each rewrite waits at most ERASE_RETRY_LOCK_WAIT for it, not erase_lock_timeout (5 s by default),
    so writers of the shard, queued behind the waiting rewrite, never wait much longer than that."""
    secret = f"lockedtext{uuid.uuid4().hex}"
    with (
        _open(cluster, schema_name, erase_lock_timeout=0.3, erase_retry_interval=60.0) as forgetter,
        _open(cluster, schema_name, erase_retry_interval=0.2) as other,
    ):
        put(forgetter, f"the secret is {secret}\n", subject="subject-l")
        shard = _shard(cluster, schema_name)
        locker = cluster.admin("memvault")
        try:
            with old_snapshot(cluster) as holder:
                _forget_pending(forgetter, "subject-l")
                locker.execute("BEGIN")
                locker.execute(f"LOCK TABLE {schema_name}.{shard} IN ACCESS SHARE MODE")
                assert other.health().pending_erasures == 1  # and its retry starts
                holder.execute("ROLLBACK")
            waits: list[float] = []
            seen_waiting = 0
            with cluster.admin("memvault") as watcher:
                end = time.monotonic() + 3.0
                writer = threading.Thread(target=_write_until, args=(other, end, waits))
                writer.start()
                while time.monotonic() < end:
                    row = watcher.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND query LIKE 'VACUUM (FULL%'"
                    ).fetchone()
                    seen_waiting += int(row[0]) if row else 0
                    time.sleep(0.02)
                writer.join()
            assert seen_waiting, "the retry never waited for the shard's lock: the test proves nothing"
            assert recorded(cluster, schema_name) > 0  # the shard is still locked
            print(f"{len(waits)} writes, the slowest {max(waits):.3f} s")
            assert max(waits) < ERASE_RETRY_LOCK_WAIT + 1.0
            locker.execute("COMMIT")
        finally:
            locker.close()
        took = until_erasures_finished(cluster, schema_name)
        print(f"finished {took:.2f} s after the lock went")
        assert other.health().pending_erasures == 0
    assert _retry_threads() == []
    no_trace(cluster, schema_name, secret)


def _write_until(vault: memvault.Vault, end: float, waits: list[float]) -> None:
    n = 0
    while time.monotonic() < end:
        start = time.monotonic()
        put(vault, f"line {n}\n", mode="replace")
        waits.append(time.monotonic() - start)
        n += 1


def test_the_retry_defers_to_another_process_retrying_the_same_store_p24(
    cluster: TemporaryCluster, schema_name: str
) -> None:
    """Processes on one schema never rewrite a shard twice at once: a retry runs under a session
    advisory lock on the schema, and a process that finds it taken leaves the round to its holder."""
    secret = f"sharedtext{uuid.uuid4().hex}"
    with _open(cluster, schema_name, **FAST) as vault:
        put(vault, f"the secret is {secret}\n", subject="subject-d")
        shard = _shard(cluster, schema_name)
        with cluster.admin("memvault") as other_process:
            other_process.execute(
                "SELECT pg_advisory_lock(hashtextextended(%s, 0))", (f"memvault-erase-retry:{schema_name}",)
            )
            with old_snapshot(cluster) as holder:
                _forget_pending(vault, "subject-d")
                holder.execute("ROLLBACK")
            before = _filenode(cluster, schema_name, shard)
            time.sleep(1.0)
            assert _filenode(cluster, schema_name, shard) == before  # left to the lock's holder
            assert recorded(cluster, schema_name) > 0
            other_process.execute(
                "SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (f"memvault-erase-retry:{schema_name}",)
            )
        took = until_erasures_finished(cluster, schema_name)
        print(f"finished {took:.2f} s after the other retry let go")
        assert vault.health().pending_erasures == 0
    no_trace(cluster, schema_name, secret)


def test_the_retry_loop_doubles_its_pause_up_to_the_cap_and_ends_when_nothing_is_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retry, "ERASE_RETRY_CAP", 0.16)
    calls: list[float] = []

    def attempt() -> bool:
        calls.append(time.monotonic())
        return len(calls) == 6

    start = time.monotonic()
    loop = retry.RetryLoop(attempt, interval=0.02, name=f"{THREAD}-unit")
    loop.kick()
    loop.kick()  # running already: one thread
    assert len(_retry_threads()) == 1
    _retry_ends()
    gaps = [b - a for a, b in zip([start, *calls[:-1]], calls, strict=True)]
    assert len(gaps) == 6
    for gap, pause in zip(gaps, [0.02, 0.04, 0.08, 0.16, 0.16, 0.16], strict=True):
        assert gap >= pause * 0.9
    assert loop.stop(wait=1.0)
    loop.kick()  # stopped: starts nothing
    assert _retry_threads() == []
