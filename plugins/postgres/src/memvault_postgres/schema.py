"""The database schema and its versioned migrations (the ``meta`` table's ``schema_version``).

Version history:

* **1** (memvault-postgres 0.1): in the configured schema (default
  ``memvault``): ``meta`` (the version), ``partitions`` (one row per
  workspace/agent or workspace/crew), ``documents`` (bodies, the data subjects
  that wrote them, digests, line and term counts) and ``lines`` (one row per
  non-blank line with its index terms and a ``tsvector`` under a GIN index),
  both hash-partitioned by partition id into :data:`SHARDS` tables, so an
  erasure rewrites one shard instead of the whole store; ``quarantine``,
  ``erasures`` (shards whose files still have to be rewritten after an
  erasure, see the provider) and ``probe`` (the health check's rolled-back
  write).
* **2**: ``tier_counts`` holds each partition's and tier's line and term
  totals as rows of changes, which every write that changes a document's
  counts (retain, forget, erasure) inserts in its own transaction and which
  writes fold (and, more rarely, recount) every so often, so a recall reads a few rows instead of
  summing every document of the partition (a long history of daily
  documents no longer makes every recall slower).
* **3**: a document's ``UNIQUE (partition_id, tier, key)`` is indexed as
  ``(tier, key, partition_id)``, so before a shard has statistics the planner
  joins lines to their documents by the primary key (see :func:`_to_v3`).
* **4**: the lines' GIN indexes take new entries at once (``fastupdate = off``)
  instead of in a pending list that every search scans whole until a vacuum
  merges it (see :func:`_to_v4`).
* **5**: ``forgotten_subjects`` remembers, per workspace and data subject, the
  shards and labels of documents that subject wrote to and that a forget by id
  removed without rewriting the files, so a later erasure of the subject
  rewrites those shards and removes the quarantine copies of those documents
  (see :func:`_to_v5`).
* **6**: recall by meaning (contract P36-P40): ``line_vectors``, one row per
  indexed line, written with the line in its transaction and deleted with it:
  the digest of its text, and once embedded the model and the vector
  (little-endian float16 ``bytea``); hash-partitioned by partition id like
  ``lines`` (shard ``line_vectors_N`` beside ``lines_N``), so an erasure
  rewrites its shard too (see :func:`_to_v6`).
* **7**: memory over time (contract P41-P45): ``documents.expires_at`` (the
  explicit expiry of the last write) and ``documents.purge_at`` (the moment the
  document is absent: the earlier of that and the last write plus its tier's
  retention), indexed where set, and the documents indexed by tier and last
  write (the retention sweep's cutoffs); ``quarantine.expires_at``;
  ``idempotency_keys``, one row per workspace and key (its primary key: two
  replicas on one database claim a key once), written in the transaction of the
  write it records (see :func:`_to_v7`).

Columns holding memory text never get planner statistics (``SET STATISTICS
0``): ``ANALYZE`` would otherwise copy sample values into ``pg_statistic``,
where an erasure of the rows cannot reach them.

A migration runs in one transaction under an advisory lock, so concurrent
openers (several replicas starting at once) wait for it, and a failed
migration leaves the old version intact.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable
from typing import Final

import psycopg
from psycopg import sql

from memvault import body_sha256

__all__ = ["SCHEMA_VERSION", "SHARDS", "ForeignSchema", "NewerSchema", "body_sha256", "migrate"]

SCHEMA_VERSION: Final = 7
#: ``documents`` and ``lines`` are split into this many hash partitions.
SHARDS: Final = 16
SCHEMA_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_OUR_TABLES: Final = frozenset(
    {
        "meta",
        "partitions",
        "documents",
        "lines",
        "quarantine",
        "erasures",
        "probe",
        "tier_counts",
        "forgotten_subjects",
        "line_vectors",
        "idempotency_keys",
    }
)
#: About one write in this many folds its partition's and tier's change rows into one.
TIER_COUNTS_FOLD: Final = 16
#: About one write in this many recounts its partition's tier from the documents instead
#: (a sum over every document of the tier: too dear for every fold on a long history).
TIER_COUNTS_RECOUNT: Final = 1024


class NewerSchema(Exception):
    """The schema was written by a newer memvault-postgres."""

    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


class ForeignSchema(Exception):
    """The schema holds tables that are not memvault's."""

    def __init__(self, tables: list[str]) -> None:
        super().__init__(tables)
        self.tables = tables


_V1: Final = [
    "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE partitions (
        id bigserial PRIMARY KEY,
        workspace_id text NOT NULL,
        kind text NOT NULL CHECK (kind IN ('agent', 'crew')),
        owner_id text NOT NULL,
        UNIQUE (workspace_id, kind, owner_id)
    )""",
    """CREATE TABLE documents (
        partition_id bigint NOT NULL,
        id bigint NOT NULL GENERATED ALWAYS AS IDENTITY,
        workspace_id text NOT NULL,
        tier text NOT NULL,
        key text NOT NULL DEFAULT '',
        label text NOT NULL,
        body text NOT NULL,
        size integer NOT NULL,
        subjects text[] NOT NULL DEFAULT '{}',
        sha256 text NOT NULL,
        line_count integer NOT NULL DEFAULT 0,
        term_count integer NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        PRIMARY KEY (partition_id, id),
        UNIQUE (partition_id, tier, key)
    ) PARTITION BY HASH (partition_id)""",
    "CREATE INDEX documents_by_subject ON documents USING gin (subjects)",
    """CREATE TABLE lines (
        partition_id bigint NOT NULL,
        document_id bigint NOT NULL,
        line_no integer NOT NULL,
        tier text NOT NULL,
        text text NOT NULL,
        terms text NOT NULL,
        length integer NOT NULL,
        tsv tsvector NOT NULL,
        PRIMARY KEY (partition_id, document_id, line_no)
    ) PARTITION BY HASH (partition_id)""",
    "CREATE INDEX lines_search ON lines USING gin (tsv)",
    """CREATE TABLE quarantine (
        id bigserial PRIMARY KEY,
        workspace_id text NOT NULL,
        agent_id text NOT NULL DEFAULT '',
        crew_id text NOT NULL DEFAULT '',
        label text NOT NULL,
        category text NOT NULL,
        pattern text NOT NULL,
        sha256 text NOT NULL,
        content text NOT NULL,
        created_at timestamptz NOT NULL,
        data_subject_id text NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX quarantine_by_digest ON quarantine (workspace_id, sha256)",
    "CREATE INDEX quarantine_by_subject ON quarantine (workspace_id, data_subject_id) WHERE data_subject_id <> ''",
    "CREATE TABLE erasures (relation text PRIMARY KEY, requested_at timestamptz NOT NULL)",
    "CREATE TABLE probe (id integer)",
]
_NO_STATISTICS: Final = {
    "documents": ("body", "subjects", "label", "key"),
    "lines": ("text", "terms", "tsv"),
    "quarantine": ("content", "data_subject_id", "label"),
}


def _create_v1(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    for statement in _V1:
        conn.execute(statement)
    for table in ("documents", "lines"):
        for n in range(SHARDS):
            conn.execute(
                sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES WITH (MODULUS {}, REMAINDER {})").format(
                    sql.Identifier(f"{table}_{n}"), sql.Identifier(table), sql.Literal(SHARDS), sql.Literal(n)
                )
            )
    for table, columns in _NO_STATISTICS.items():
        for column in columns:
            # On a partitioned table this recurses to every shard.
            conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET STATISTICS 0").format(
                    sql.Identifier(table), sql.Identifier(column)
                )
            )


def _to_v2(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """``tier_counts``, filled from ``documents``.

    Writers wait for the fill (the share lock on ``documents`` lasts until the
    migration commits). A writer of schema 1 that keeps running during an
    upgrade adds no change rows; the next recount of that partition's tier
    (:data:`TIER_COUNTS_RECOUNT`), which sums the documents again, mends its
    totals.
    """
    conn.execute(
        "CREATE TABLE tier_counts (partition_id bigint NOT NULL, tier text NOT NULL,"
        " lines bigint NOT NULL, terms bigint NOT NULL)"
    )
    conn.execute("CREATE INDEX tier_counts_by_tier ON tier_counts (partition_id, tier)")
    conn.execute("LOCK TABLE documents IN SHARE MODE")  # writers of schema 1 wait for the commit
    conn.execute(
        "INSERT INTO tier_counts (partition_id, tier, lines, terms)"
        " SELECT partition_id, tier, sum(line_count), sum(term_count) FROM documents GROUP BY partition_id, tier"
        " HAVING sum(line_count) <> 0 OR sum(term_count) <> 0"
    )


def _to_v3(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """A document's (partition, tier, key) uniqueness indexed as ``(tier, key, partition_id)``.

    Until autovacuum first analyses a shard (its first minute with data, or after a
    restore), PostgreSQL plans without statistics, and it read each candidate line's
    document through the index of ``UNIQUE (partition_id, tier, key)`` on the partition
    id alone, walking every version of every document of the partition per line: after
    1,500 appends and forgets, reading 1,000 candidate lines took 90-130 ms instead of 1-2 ms
    (a recall 195 ms instead of 14 ms). With
    the partition id last no index but the primary key ``(partition_id, id)`` starts with
    it, so the join goes by primary key whatever the statistics. (Same columns: the
    constraint and ``ON CONFLICT (partition_id, tier, key)`` mean the same.)
    """
    present = conn.execute(
        "SELECT 1 FROM pg_constraint WHERE conrelid = 'documents'::regclass"
        " AND conname = 'documents_tier_key_partition_id_key'"
    ).fetchone()
    if present is None:
        conn.execute(
            "ALTER TABLE documents ADD CONSTRAINT documents_tier_key_partition_id_key UNIQUE (tier, key, partition_id)"
        )
    conn.execute("ALTER TABLE documents DROP CONSTRAINT IF EXISTS documents_partition_id_tier_key_key")


def _to_v4(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Every shard's GIN index over the lines' ``tsvector`` without a pending list (``fastupdate = off``).

    With PostgreSQL's default, a GIN index queues new entries in a pending list, which
    every search of the shard reads whole, until a vacuum (or 4 MB of them) merges it
    into the index. Lines arrive a few at a time, so the lists grew between vacuums and
    every recall paid for them: 10,000 single-line retains into ten partitions made a
    LoCoMo recall 15-25 % slower (3.0-3.5 against 2.5-2.9 ms p50; up to 4 MB per shard
    would cost several milliseconds more) for 7-8 % less per retain (+0.09-0.11 ms).
    The lists the shards hold now are merged here, once.
    """
    for oid, namespace, name in conn.execute(
        "SELECT c.oid, n.nspname, c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
        " JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE i.inhparent = 'lines_search'::regclass"
    ).fetchall():
        conn.execute(sql.SQL("ALTER INDEX {} SET (fastupdate = off)").format(sql.Identifier(str(namespace), str(name))))
        conn.execute("SELECT gin_clean_pending_list(%s::oid::regclass)", (oid,))


def _to_v5(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """``forgotten_subjects``: what a forget by id left of a subject's documents in the table files.

    A forget by id deletes a document's rows but rewrites no file (that needs a ``VACUUM
    FULL`` of the shard, an exclusive lock): the text stays in the heap until a vacuum
    and in the GIN index until the shard is rewritten (an ordinary vacuum never removes
    index keys). One row per subject the document carried, its two shards and its label,
    written in the forget's transaction: a later erasure of the subject rewrites those
    shards and removes the quarantine copies of rejected appends to that document kept
    until then (P24). Forgets by id before this version left no such rows.
    """
    conn.execute(
        "CREATE TABLE IF NOT EXISTS forgotten_subjects (workspace_id text NOT NULL, data_subject_id text NOT NULL,"
        " partition_id bigint NOT NULL, label text NOT NULL, documents_shard text NOT NULL,"
        " lines_shard text NOT NULL, forgotten_at timestamptz NOT NULL,"
        " PRIMARY KEY (workspace_id, data_subject_id, partition_id, label))"
    )
    for column in ("data_subject_id", "label"):
        conn.execute(
            sql.SQL("ALTER TABLE forgotten_subjects ALTER COLUMN {} SET STATISTICS 0").format(sql.Identifier(column))
        )


def _to_v6(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """``line_vectors``: a row per indexed line, its vector once the embedder made one (P37).

    A row without a model is a line waiting for its vector: the index on ``model`` finds
    those (and the lines whose vector is of another model) without reading the vectors, and
    the backlog survives a crash like the line itself. The row is written and deleted in
    the transaction that writes or deletes its line, so no vector outlives its text. A
    separate table, not columns of ``lines``: storing a vector there would write a new
    version of the line and new entries in its search index.
    Every line indexed before waits for a vector (their digests computed here, once).
    Idempotent: a store set back to an older version number with its table kept upgrades again.
    """
    conn.execute(
        "CREATE TABLE IF NOT EXISTS line_vectors (partition_id bigint NOT NULL, document_id bigint NOT NULL,"
        " line_no integer NOT NULL, tier text NOT NULL, digest text NOT NULL, model text, vector bytea,"
        " PRIMARY KEY (partition_id, document_id, line_no)) PARTITION BY HASH (partition_id)"
    )
    for n in range(SHARDS):
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} PARTITION OF line_vectors FOR VALUES WITH (MODULUS {}, REMAINDER {})"
            ).format(sql.Identifier(f"line_vectors_{n}"), sql.Literal(SHARDS), sql.Literal(n))
        )
    conn.execute("CREATE INDEX IF NOT EXISTS line_vectors_by_model ON line_vectors (model)")
    # Derived from memory text: never sampled into pg_statistic, where an erasure cannot reach it.
    for column in ("digest", "vector"):
        conn.execute(
            sql.SQL("ALTER TABLE line_vectors ALTER COLUMN {} SET STATISTICS 0").format(sql.Identifier(column))
        )
    conn.execute("LOCK TABLE lines IN SHARE MODE")  # writers of schema 5 wait for the commit
    conn.execute(
        "INSERT INTO line_vectors (partition_id, document_id, line_no, tier, digest)"
        " SELECT partition_id, document_id, line_no, tier, left(encode(sha256(convert_to(text, 'UTF8')), 'hex'), 16)"
        " FROM lines ON CONFLICT DO NOTHING"
    )


def _to_v7(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Expiry and purge times, their indexes, quarantine expiry and ``idempotency_keys``.

    New columns are NULL (no expiry): adding them rewrites nothing. Every time in them is
    written from the client's clock (``memvault.contract.clock``), never SQL ``now()``.
    Idempotent: a store set back to an older version number with these kept upgrades again.
    """
    conn.execute("ALTER TABLE documents ADD COLUMN IF NOT EXISTS expires_at timestamptz")
    conn.execute("ALTER TABLE documents ADD COLUMN IF NOT EXISTS purge_at timestamptz")
    # The sweep and health find what is due without a scan; a recall subtracts its partitions'
    # expired documents from their statistics through the second.
    conn.execute("CREATE INDEX IF NOT EXISTS documents_by_purge ON documents (purge_at) WHERE purge_at IS NOT NULL")
    conn.execute(
        "CREATE INDEX IF NOT EXISTS documents_expiring ON documents (partition_id, purge_at) WHERE purge_at IS NOT NULL"
    )
    # The retention sweep's cutoffs: a tier's documents whose last write is older than the cutoff.
    conn.execute("CREATE INDEX IF NOT EXISTS documents_by_write ON documents (tier, updated_at)")
    conn.execute("ALTER TABLE quarantine ADD COLUMN IF NOT EXISTS expires_at timestamptz")
    conn.execute(
        "CREATE INDEX IF NOT EXISTS quarantine_by_expiry ON quarantine (expires_at) WHERE expires_at IS NOT NULL"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS idempotency_keys (workspace_id text NOT NULL, key text NOT NULL,"
        " fingerprint text NOT NULL, result_id text NOT NULL, bytes bigint NOT NULL, warning text NOT NULL,"
        " recorded_at timestamptz NOT NULL, PRIMARY KEY (workspace_id, key))"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS idempotency_keys_by_age ON idempotency_keys (recorded_at)")


#: ``MIGRATIONS[v]`` brings a version ``v`` schema to version ``v + 1``.
MIGRATIONS: Final[dict[int, Callable[[psycopg.Connection[tuple[object, ...]]], None]]] = {
    1: _to_v2,
    2: _to_v3,
    3: _to_v4,
    4: _to_v5,
    5: _to_v6,
    6: _to_v7,
}


def migrate(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> int:
    """Create or upgrade ``schema``; the caller holds a transaction on ``conn``.

    :return: the version the schema had before (0: created now).
    :raises NewerSchema: for a version newer than :data:`SCHEMA_VERSION`.
    :raises ForeignSchema: when the schema holds another application's tables.
    """
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"memvault-schema:{schema}",))
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    tables = {
        str(r[0])
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition",
            (schema,),
        )
    }
    if "meta" not in tables:
        if tables:
            raise ForeignSchema(sorted(tables - _OUR_TABLES) or sorted(tables))
        version = 0
    else:
        row = conn.execute(
            sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(sql.Identifier(schema))
        ).fetchone()
        version = int(str(row[0])) if row else 0
    if version > SCHEMA_VERSION:
        raise NewerSchema(version)
    if version == SCHEMA_VERSION:
        return version
    conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
    if version == 0:
        _create_v1(conn)
        start = 1
    else:
        start = version
    for v in range(start, SCHEMA_VERSION):
        MIGRATIONS[v](conn)
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', %s)"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (str(SCHEMA_VERSION),),
    )
    return version


def now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)
