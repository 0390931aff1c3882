"""Schema 2: a recall reads its partition's line and term totals from ``tier_counts``, kept by triggers.

The totals must equal the sums over the documents after any mix of writes, also
concurrent ones, and a store written by schema 1 gets them by its migration.
"""

from __future__ import annotations

import random
import threading

import psycopg
import pytest
from pg_helpers import put, recall

import memvault
import memvault_postgres.schema
from memvault_postgres.schema import SCHEMA_VERSION, TIER_COUNTS_FOLD
from memvault_postgres.testing import TemporaryCluster

_SUMS = (
    "SELECT partition_id, tier, sum(line_count)::bigint, sum(term_count)::bigint FROM {s}.documents"
    " GROUP BY 1, 2 HAVING sum(line_count) <> 0 OR sum(term_count) <> 0 ORDER BY 1, 2"
)
_COUNTS = (
    "SELECT partition_id, tier, sum(lines)::bigint, sum(terms)::bigint FROM {s}.tier_counts"
    " GROUP BY 1, 2 HAVING sum(lines) <> 0 OR sum(terms) <> 0 ORDER BY 1, 2"
)


_Rows = list[tuple[object, ...]]


def _totals(conn: psycopg.Connection[tuple[object, ...]], schema_name: str) -> tuple[_Rows, _Rows]:
    return (
        conn.execute(_SUMS.format(s=schema_name)).fetchall(),
        conn.execute(_COUNTS.format(s=schema_name)).fetchall(),
    )


def test_the_totals_follow_every_kind_of_write(cluster: TemporaryCluster, schema_name: str) -> None:
    rng = random.Random(7)
    words = ["harbour", "sail", "rope", "tide", "gull", "anchor", "mast"]
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as v:
        for step in range(300):
            ws = f"w{rng.randrange(2)}"
            key = f"2026-01-{rng.randrange(1, 6):02d}"
            action = rng.random()
            if action < 0.1:
                v.forget(memvault.ForgetRequest(workspace_id=ws, agent_id="a1", id=f"daily/{key}.md"))
            elif action < 0.15:
                v.forget(memvault.ForgetRequest(workspace_id=ws, data_subject_id=f"s{rng.randrange(3)}"))
            else:
                text = "".join(
                    " ".join(rng.choice(words) for _ in range(rng.randrange(1, 6))) + "\n"
                    for _ in range(rng.randrange(0, 4))
                ) + ("tail without newline" if step % 7 == 0 else "")
                put(
                    v,
                    text or "x",
                    ws=ws,
                    tier=rng.choice(["daily", "daily", "AGENT"]) if action < 0.9 else "pins",
                    key=key if action < 0.9 else "",
                    subject=f"s{rng.randrange(3)}",
                    mode=rng.choice(["append", "append", "replace"]),
                )
        with cluster.admin("memvault") as conn:
            sums, counts = _totals(conn, schema_name)
    assert sums == counts
    assert sums  # the mix left some documents


@pytest.mark.parametrize("recount", [False, True])
def test_folds_keep_a_few_rows_and_recounts_mend_a_missed_change(
    monkeypatch: pytest.MonkeyPatch, cluster: TemporaryCluster, schema_name: str, recount: bool
) -> None:
    # Every fold a recount, or none, so neither waits for chance.
    monkeypatch.setattr(memvault_postgres.schema, "TIER_COUNTS_RECOUNT", TIER_COUNTS_FOLD if recount else 10**12)
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as v:
        put(v, "first line\n", tier="daily", key="2026-04-01")
        with cluster.admin("memvault") as conn:
            # A write that added no change row (a provider of schema 1 still running during an upgrade).
            conn.execute(f"UPDATE {schema_name}.documents SET line_count = line_count + 5, term_count = term_count + 9")
            sums, counts = _totals(conn, schema_name)
        assert sums != counts
        for i in range(25 * TIER_COUNTS_FOLD):
            put(v, f"line {i}\n", tier="daily", key="2026-04-01")
        with cluster.admin("memvault") as conn:
            sums, counts = _totals(conn, schema_name)
            rows = conn.execute(f"SELECT count(*) FROM {schema_name}.tier_counts").fetchone()
    # A fold keeps the totals as they were (the missed change stays missed); a recount mends them.
    if recount:
        assert sums == counts
    else:
        assert [(p, t, lines + 5, terms + 9) for p, t, lines, terms in counts] == sums  # type: ignore[operator]
    assert rows is not None
    # One row per write without folds, about TIER_COUNTS_FOLD with them (192 writes in a row unfolded: p < 1e-5).
    assert int(rows[0]) < 12 * TIER_COUNTS_FOLD


def test_concurrent_writers_of_one_tier_keep_the_totals_exact(cluster: TemporaryCluster, schema_name: str) -> None:
    errors: list[BaseException] = []
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as v:
        put(v, "start\n", tier="daily", key="2026-02-01")

        def writer(w: int) -> None:
            try:
                for i in range(60):
                    # Distinct documents of one partition and tier: their changes land in the same
                    # totals, and folds run while other writers insert.
                    put(v, f"writer {w} line {i} word{i % 5}\n", tier="daily", key=f"2026-02-{1 + (w + i) % 9:02d}")
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        with cluster.admin("memvault") as conn:
            sums, counts = _totals(conn, schema_name)
    assert errors == []
    assert sums == counts


def test_a_schema_1_store_is_migrated_and_recalls_the_same(cluster: TemporaryCluster, schema_name: str) -> None:
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as v:
        for i in range(30):
            put(v, f"day {i}: the harbour was calm, tide {i % 4}\n", tier="daily", key=f"2026-03-{1 + i % 20:02d}")
        put(v, "the harbour master is called Ines\n")
        before = [(h.source, h.line, h.score) for h in recall(v, "harbour tide")]
    with cluster.admin("memvault") as conn:
        # What schema 1 had: no tier_counts, documents unique by partition first.
        conn.execute(f"DROP TABLE {schema_name}.tier_counts")
        conn.execute(f"ALTER TABLE {schema_name}.documents DROP CONSTRAINT documents_tier_key_partition_id_key")
        conn.execute(
            f"ALTER TABLE {schema_name}.documents ADD CONSTRAINT documents_partition_id_tier_key_key"
            " UNIQUE (partition_id, tier, key)"
        )
        conn.execute(f"UPDATE {schema_name}.meta SET value = '1' WHERE key = 'schema_version'")
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as v:
        assert [(h.source, h.line, h.score) for h in recall(v, "harbour tide")] == before
        put(v, "one more calm harbour day\n", tier="daily", key="2026-03-02")
        with cluster.admin("memvault") as conn:
            sums, counts = _totals(conn, schema_name)
            version = conn.execute(f"SELECT value FROM {schema_name}.meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)
    assert sums == counts
