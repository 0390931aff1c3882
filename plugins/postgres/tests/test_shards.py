"""A partition's calls touch only its own shard, however often the same statements run.

An erasure rewrites one shard under an exclusive lock (``VACUUM FULL``), so
only the partitions of that shard may wait for it. psycopg prepares a
statement once it has run five times, and PostgreSQL's generic plan for a
prepared statement over the hash-partitioned tables locks every shard (and,
with an array of partition ids, reads every shard too): then one shard's
rewrite stalls every tenant, and a recall grows with the whole store.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from pg_helpers import body, put, recall

import memvault
from memvault.contract.errors import UpstreamTimeout
from memvault_postgres.testing import TemporaryCluster


@pytest.fixture(params=["auto", "force_generic_plan"])
def quick(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, cluster: TemporaryCluster, schema_name: str
) -> Iterator[memvault.Vault]:
    """A vault whose statements give up after 2 s, with the server choosing plans as it likes or generic ones.

    PostgreSQL turns to a prepared statement's generic plan once its estimated cost looks no worse than the
    custom plans' (which depends on the statistics of the moment); ``force_generic_plan`` makes that certain.
    """
    monkeypatch.setenv("PGOPTIONS", f"-c plan_cache_mode={request.param}")
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off", statement_timeout=2.0) as v:
        yield v


def _shard(cluster: TemporaryCluster, schema_name: str) -> str:
    with cluster.admin("memvault") as conn:
        row = conn.execute(f"SELECT tableoid::regclass::text FROM {schema_name}.documents LIMIT 1").fetchone()
    assert row is not None
    return str(row[0]).rsplit("_", 1)[1]


@pytest.mark.parametrize("verb", ["recall", "retain", "read", "forget"])
def test_a_locked_shard_does_not_stall_a_partition_of_another_shard(
    cluster: TemporaryCluster, schema_name: str, quick: memvault.Vault, verb: str
) -> None:
    for i in range(40):
        put(quick, f"line {i} about the harbour\n", tier="peers", key=f"p{i % 4}")
    with cluster.admin("memvault") as conn:
        conn.execute(f"ANALYZE {schema_name}.documents, {schema_name}.lines")  # as autovacuum does
    for _ in range(12):  # well past psycopg's prepare threshold (5) for every statement
        put(quick, "more about the harbour\n")
        assert recall(quick, "harbour")
        assert body(quick)
    mine = _shard(cluster, schema_name)
    other = str((int(mine) + 1) % 16)
    locked = threading.Event()
    release = threading.Event()

    def hold() -> None:
        # What an erasure's VACUUM FULL of another shard holds while it rewrites it.
        with cluster.admin("memvault") as conn, conn.transaction():
            conn.execute(
                f"LOCK TABLE {schema_name}.documents_{other}, {schema_name}.lines_{other} IN ACCESS EXCLUSIVE MODE"
            )
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        try:
            if verb == "recall":
                assert recall(quick, "harbour")
            elif verb == "retain":
                put(quick, "one more about the harbour\n")
            elif verb == "read":
                assert "harbour" in body(quick)
            else:
                removed = quick.forget(memvault.ForgetRequest(workspace_id="w1", agent_id="a1", id="peers/p1.md"))
                assert removed.removed == 1
        except UpstreamTimeout as exc:
            pytest.fail(f"a {verb} of shard {mine} waited for the lock on shard {other}: {exc}")
    finally:
        release.set()
        holder.join(30)
