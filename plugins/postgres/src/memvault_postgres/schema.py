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
  totals as rows of changes, which triggers on ``documents`` add for every
  write (retain, forget, erasure) and fold every so often, so a recall reads
  a few rows instead of summing every document of the partition (a long
  history of daily documents no longer makes every recall slower). Each
  shard's GIN index keeps a pending list of at most
  :data:`GIN_PENDING_LIST_KB` (the server's default is 4 MB, which every
  search of the shard scans in full until it is flushed).

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

SCHEMA_VERSION: Final = 2
#: ``documents`` and ``lines`` are split into this many hash partitions.
SHARDS: Final = 16
SCHEMA_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_OUR_TABLES: Final = frozenset(
    {"meta", "partitions", "documents", "lines", "quarantine", "erasures", "probe", "tier_counts"}
)
#: The most kilobytes of new index entries a shard's GIN index keeps unsorted
#: (its pending list) before the write that passes it merges them into the index.
GIN_PENDING_LIST_KB: Final = 64
#: About one change row in this many folds its partition's and tier's rows into one.
TIER_COUNTS_FOLD: Final = 16


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


_V2_FUNCTIONS: Final = """
CREATE FUNCTION {schema}.add_tier_count(p bigint, t text, dl bigint, dt bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    IF dl = 0 AND dt = 0 THEN
        RETURN;
    END IF;
    INSERT INTO {schema}.tier_counts (partition_id, tier, lines, terms) VALUES (p, t, dl, dt) RETURNING id INTO n;
    -- Fold now and then. Only one transaction folds a partition's tier at a time (the others skip),
    -- so folders never wait on each other; changes other transactions have not committed yet are
    -- invisible to the DELETE and stay as they are.
    IF n % {fold} = 0 THEN
        IF pg_try_advisory_xact_lock(hashtextextended({key} || p || ':' || t, 0)) THEN
            WITH gone AS (
                DELETE FROM {schema}.tier_counts WHERE partition_id = p AND tier = t RETURNING lines, terms
            )
            INSERT INTO {schema}.tier_counts (partition_id, tier, lines, terms)
            SELECT p, t, sum(lines), sum(terms) FROM gone HAVING sum(lines) <> 0 OR sum(terms) <> 0;
        END IF;
    END IF;
END
$$;
CREATE FUNCTION {schema}.count_tier_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.partition_id = NEW.partition_id AND OLD.tier = NEW.tier THEN
        PERFORM {schema}.add_tier_count(
            NEW.partition_id, NEW.tier, NEW.line_count - OLD.line_count, NEW.term_count - OLD.term_count
        );
    ELSE
        IF TG_OP <> 'INSERT' THEN
            PERFORM {schema}.add_tier_count(OLD.partition_id, OLD.tier, -OLD.line_count, -OLD.term_count);
        END IF;
        IF TG_OP <> 'DELETE' THEN
            PERFORM {schema}.add_tier_count(NEW.partition_id, NEW.tier, NEW.line_count, NEW.term_count);
        END IF;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER tier_counts_insert AFTER INSERT ON {schema}.documents
    FOR EACH ROW EXECUTE FUNCTION {schema}.count_tier_change();
CREATE TRIGGER tier_counts_delete AFTER DELETE ON {schema}.documents
    FOR EACH ROW EXECUTE FUNCTION {schema}.count_tier_change();
CREATE TRIGGER tier_counts_update AFTER UPDATE ON {schema}.documents
    FOR EACH ROW WHEN (
        OLD.line_count <> NEW.line_count OR OLD.term_count <> NEW.term_count
        OR OLD.partition_id <> NEW.partition_id OR OLD.tier <> NEW.tier
    ) EXECUTE FUNCTION {schema}.count_tier_change();
"""


def _to_v2(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """``tier_counts`` with its triggers, filled from ``documents``; small GIN pending lists."""
    row = conn.execute("SELECT current_schema()").fetchone()
    assert row is not None
    name = str(row[0])
    conn.execute(
        "CREATE TABLE tier_counts (id bigserial PRIMARY KEY, partition_id bigint NOT NULL, tier text NOT NULL,"
        " lines bigint NOT NULL, terms bigint NOT NULL)"
    )
    conn.execute("CREATE INDEX tier_counts_by_tier ON tier_counts (partition_id, tier)")
    # The triggers come first: creating them locks out writers until this transaction
    # commits, so the totals below and every later change add up.
    conn.execute(
        sql.SQL(_V2_FUNCTIONS).format(
            schema=sql.Identifier(name),
            fold=sql.Literal(TIER_COUNTS_FOLD),
            key=sql.Literal(f"memvault-tier-counts:{name}:"),
        )
    )
    conn.execute(
        "INSERT INTO tier_counts (partition_id, tier, lines, terms)"
        " SELECT partition_id, tier, sum(line_count), sum(term_count) FROM documents GROUP BY partition_id, tier"
        " HAVING sum(line_count) <> 0 OR sum(term_count) <> 0"
    )
    shards = conn.execute(
        "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'lines_search'::regclass ORDER BY c.relname"
    ).fetchall()
    for (index,) in shards:
        conn.execute(
            sql.SQL("ALTER INDEX {} SET (gin_pending_list_limit = {})").format(
                sql.Identifier(str(index)), sql.Literal(GIN_PENDING_LIST_KB)
            )
        )


#: ``MIGRATIONS[v]`` brings a version ``v`` schema to version ``v + 1``.
MIGRATIONS: Final[dict[int, Callable[[psycopg.Connection[tuple[object, ...]]], None]]] = {1: _to_v2}


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
