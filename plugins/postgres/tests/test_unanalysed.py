"""A recall is fast before PostgreSQL has statistics for a shard (schema 3).

Autovacuum analyses a shard up to a minute after it first holds data, and a
restored dump carries no statistics at all. In that window the planner read each
candidate line's document through the index of ``UNIQUE (partition_id, tier, key)``
on the partition id alone, visiting every version of every document of the
partition per line: after many appends and forgets a recall took 90-130 ms
instead of 1-2 ms. Schema 3 indexes the constraint as ``(tier, key, partition_id)``.
"""

from __future__ import annotations

import statistics
import time

import memvault
from memvault_postgres.schema import SCHEMA_VERSION, SHARDS
from memvault_postgres.testing import TemporaryCluster


def _append(day: str, text: str) -> memvault.RetainRequest:
    return memvault.RetainRequest(workspace_id="w", agent_id="a", tier="daily", key=day, content=text, mode="append")


def _no_autovacuum(cluster: TemporaryCluster, schema_name: str) -> None:
    """Hold the shards in the window before autovacuum's first ANALYZE."""
    with cluster.admin("memvault") as conn:
        for table in ("documents", "lines", "line_vectors"):
            for n in range(SHARDS):
                conn.execute(f"ALTER TABLE {schema_name}.{table}_{n} SET (autovacuum_enabled = false)")


def test_a_recall_before_the_first_analyze_joins_documents_by_primary_key(
    cluster: TemporaryCluster, schema_name: str
) -> None:
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as vault:
        _no_autovacuum(cluster, schema_name)
        for i in range(1200):  # a note kept, a scratch document written and forgotten
            day = f"{2000 + i // 300}-{1 + (i // 25) % 12:02d}-{1 + i % 25:02d}"
            note = f"kept note {i} about the walrus\n"
            scratch = f"scratch {i}\n"
            vault.retain(_append(day, note))
            vault.retain(_append("2099-01-01", scratch))
            vault.forget(memvault.ForgetRequest(workspace_id="w", agent_id="a", id="daily/2099-01-01.md"))
        with cluster.admin("memvault") as conn:
            # The shards the recall plans over (their autovacuum is off); other tables of the schema
            # (tier counts, updated on every write) may be analysed on a slow run, and do not matter here.
            analysed = conn.execute(
                "SELECT count(*) FILTER (WHERE last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL), count(*)"
                " FROM pg_stat_user_tables WHERE schemaname = %s"
                " AND relname ~ '^(documents|lines|line_vectors)_[0-9]+$'",
                (schema_name,),
            ).fetchone()
        assert analysed == (0, 3 * SHARDS)  # every shard still planning without statistics
        request = memvault.RecallRequest(workspace_id="w", agent_id="a", query="walrus notes", limit=20)

        def median_recall() -> float:
            times = []
            for _ in range(7):
                start = time.perf_counter()
                hits = vault.recall(request).hits
                times.append(time.perf_counter() - start)
            assert len(hits) == 20
            return statistics.median(times)

        before = median_recall()
        with cluster.admin("memvault") as conn:
            conn.execute(f"ANALYZE {schema_name}.documents, {schema_name}.lines")
        after = median_recall()
        # 1,000 candidate lines, against the same recall once the shards have statistics (same run,
        # same machine): about the same by primary key; 7-14x through the partition id alone
        # (90-130 ms against 14 ms when this was found).
        assert before < 3 * after, (before, after)


def test_a_schema_2_store_is_migrated_to_the_reordered_constraint(cluster: TemporaryCluster, schema_name: str) -> None:
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as vault:
        vault.retain(_append("2026-03-01", "calm tide\n"))
    with cluster.admin("memvault") as conn:
        # What schema 2 had: the constraint keyed by partition first.
        conn.execute(f"ALTER TABLE {schema_name}.documents DROP CONSTRAINT documents_tier_key_partition_id_key")
        conn.execute(
            f"ALTER TABLE {schema_name}.documents ADD CONSTRAINT documents_partition_id_tier_key_key"
            " UNIQUE (partition_id, tier, key)"
        )
        conn.execute(f"UPDATE {schema_name}.meta SET value = '2' WHERE key = 'schema_version'")
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as vault:
        # The same document again: the reordered constraint still makes it one.
        vault.retain(_append("2026-03-01", "high tide\n"))
        read = vault.read(memvault.ReadRequest(workspace_id="w", agent_id="a", tier="daily", key="2026-03-01"))
        assert read.content == "calm tide\nhigh tide\n"
    with cluster.admin("memvault") as conn:
        version = conn.execute(f"SELECT value FROM {schema_name}.meta WHERE key = 'schema_version'").fetchone()
        columns = conn.execute(
            "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace"
            " WHERE n.nspname = %s AND c.conrelid = %s::regclass AND c.contype = 'u'",
            (schema_name, f"{schema_name}.documents"),
        ).fetchall()
    assert version == (str(SCHEMA_VERSION),)
    assert columns == [("UNIQUE (tier, key, partition_id)",)]


def _gin_leaves(conn: object, schema_name: str) -> list[tuple[str, list[str] | None]]:
    """Each shard's GIN index over the lines' tsvector, with its storage options."""
    return conn.execute(  # type: ignore[attr-defined,no-any-return]
        "SELECT c.relname, c.reloptions FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = %s::regclass ORDER BY c.relname",
        (f"{schema_name}.lines_search",),
    ).fetchall()


def test_the_lines_gin_indexes_keep_no_pending_list(cluster: TemporaryCluster, schema_name: str) -> None:
    """Schema 4: new entries go straight into the index, so a search never reads a pending list whole."""
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as vault:
        for i in range(200):
            vault.retain(_append("2026-03-01", f"note {i} about the tide\n"))
        with cluster.admin("memvault") as conn:
            leaves = _gin_leaves(conn, schema_name)
            assert len(leaves) == SHARDS
            assert all(options is not None and "fastupdate=off" in options for _, options in leaves)
            flushed = sum(
                conn.execute(f"SELECT gin_clean_pending_list('{schema_name}.{name}'::regclass)").fetchone()[0]
                for name, _ in leaves
            )
        assert flushed == 0  # nothing was pending
        assert len(vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a", query="tide")).hits) == 20


def test_a_schema_3_store_is_migrated_and_its_pending_lists_merged(cluster: TemporaryCluster, schema_name: str) -> None:
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as vault:
        _no_autovacuum(cluster, schema_name)  # no vacuum merges the pending lists behind the test's back
        with cluster.admin("memvault") as conn:
            for name, _ in _gin_leaves(conn, schema_name):  # what schema 3 had: PostgreSQL's default
                conn.execute(f"ALTER INDEX {schema_name}.{name} RESET (fastupdate)")
        for i in range(100):  # into the pending lists
            vault.retain(_append("2026-03-02", f"high tide {i}\n"))
    with cluster.admin("memvault") as conn:
        conn.execute(f"UPDATE {schema_name}.meta SET value = '3' WHERE key = 'schema_version'")
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as vault:
        hits = vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a", query="high tide 42")).hits
        assert hits[0].snippet == "high tide 42"
    with cluster.admin("memvault") as conn:
        version = conn.execute(f"SELECT value FROM {schema_name}.meta WHERE key = 'schema_version'").fetchone()
        leaves = _gin_leaves(conn, schema_name)
        left = sum(
            conn.execute(f"SELECT gin_clean_pending_list('{schema_name}.{name}'::regclass)").fetchone()[0]
            for name, _ in leaves
        )
    assert version == (str(SCHEMA_VERSION),)
    assert all(options is not None and "fastupdate=off" in options for _, options in leaves)
    assert left == 0  # the migration merged them
