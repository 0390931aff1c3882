"""The database schema and its versioned migrations (``PRAGMA user_version``).

Version history:

* **1** (memvault-sqlite 0.0.x pre-releases): one ``documents`` table keyed by
  ``(workspace_id, agent_id, crew_id, tier, key)`` holding ``body`` and
  ``updated_at``; recall scanned bodies. No data subject, no line index.
* **2** (0.1): ``partitions`` (one row per workspace/agent or workspace/crew,
  numbering its lines), ``documents`` (with ``data_subject_id`` and
  timestamps), ``lines`` (one row per non-blank line, its id = partition id
  << 32 | sequence), contentless FTS5 indexes ``lines_fts_0`` ..
  ``lines_fts_63`` (a partition's lines live in shard ``id % 64``) over the
  lines' stemmed terms (``detail=none``: only "which lines hold this term"),
  and ``quarantine``.
* **3**: quarantine copies carry ``data_subject_id``.
* **4**: every document carries its body's ``sha256``.
* **5**: ``document_subjects`` (one row per document and data subject that ever
  wrote to it, contract P13; ``documents.data_subject_id`` is no longer used and
  left empty) and ``pending_erasures`` (erasures whose rows are deleted but whose
  bytes may still be in the write-ahead log, contract P24).
* **6**: ``tier_stats``, each partition's and tier's indexed lines and terms
  (the sums of its documents' ``line_count`` and ``term_count``), kept by
  triggers on ``documents``, so a recall's BM25 statistics cost one row per
  tier, not one per document of a long history.
* **7**: recall by meaning (contract P36-P40): ``line_vectors``, one vector per
  indexed line (its ``line_id`` is the line's id, the model that made it, the
  digest of the text it was made from, little-endian float16 bytes), and
  ``lines.needs_vector`` (1 until the line has a vector of some model; a
  partial index holds only such lines), so the lines waiting for a vector are
  found without a scan, and that backlog survives a crash. A line's vector is
  deleted with the line, in the same transaction (a changed line is a new row).
* **8**: memory over time (contract P41-P45): ``documents.expires_at`` (the
  explicit expiry of the last write, or NULL) and ``documents.purge_at`` (the
  moment the document is absent: the earlier of the explicit expiry and the
  last write plus its tier's retention), indexed where set, and the documents
  indexed by tier and last write (the retention sweep's cutoffs);
  ``quarantine.expires_at``; ``idempotency_keys``, one row per workspace and
  idempotency key (its primary key), written in the transaction of the write it
  records; ``swept_shards``, the search-index shards a retention sweep deleted
  lines from and has not rewritten yet.

A migration runs inside one ``BEGIN IMMEDIATE`` transaction, so concurrent
openers wait for it and a failed migration leaves the old version intact.
"""

from __future__ import annotations

import datetime as _dt
import functools
import sqlite3
from collections.abc import Callable
from typing import Final

from memvault import body_sha256
from memvault.contract.errors import UpstreamError
from memvault.contract.models import Tier, label_for
from memvault.search import stored_line

__all__ = [
    "FTS_MAX_LEVELS",
    "FTS_SHARDS",
    "LINE_BITS",
    "SCHEMA_VERSION",
    "body_sha256",
    "delete_document",
    "fts_levels",
    "fts_shape",
    "fts_table",
    "migrate",
    "optimize_fts",
    "rebuild_deep_fts",
    "reindex_document",
    "tag_document",
]

SCHEMA_VERSION: Final = 8
#: A line's rowid is ``partition_id << LINE_BITS | sequence``: the lines of one
#: partition form one contiguous rowid range, which FTS5 seeks to directly.
LINE_BITS: Final = 32
#: Partitions are spread over this many FTS5 tables (``lines_fts_<pid % FTS_SHARDS>``),
#: so erasure rewrites (``optimize``) one shard, not the whole index.
FTS_SHARDS: Final = 64
_FTS_DDL: Final = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5 ("
    "terms, content='', columnsize=0, detail=none, tokenize=\"ascii tokenchars '_'\")"
)


def fts_table(pid: int) -> str:
    """The FTS5 table holding partition ``pid``'s lines."""
    return f"lines_fts_{pid % FTS_SHARDS}"


#: A shard's FTS5 index is rebuilt from ``lines`` when its structure has more levels than this.
#: FTS5's ``optimize`` (SQLite 3.40 at least) moves the index to a new level when new writes
#: sit on lower ones, two levels per call in a steady cycle of writes and erasures, and past
#: 2,000 levels SQLite reports the database disk image malformed: about 1,300 forgets in one
#: shard between appends did it (``plugins/sqlite/tests/test_fts_levels.py``). A rebuilt index
#: has a few.
FTS_MAX_LEVELS: Final = 100
#: The rowid of an FTS5 index's structure record in its ``_data`` table.
_STRUCTURE_ROWID: Final = 10
#: What follows the cookie of a version-2 structure record (written by newer SQLite releases).
_STRUCTURE_V2: Final = b"\xff\x00\x00\x01"


def fts_levels(conn: sqlite3.Connection, shard: int) -> int | None:
    """How many levels the FTS5 index of shard ``shard`` has, read from its structure record.

    ``None`` when the shard has no table or no structure record yet, or the record is not
    one this reads (a 4-byte cookie, an optional version-2 marker, then the level count
    as an SQLite varint): the shard is then left as it is.
    """
    shape = fts_shape(conn, shard)
    return None if shape is None else shape[0]


def fts_shape(conn: sqlite3.Connection, shard: int) -> tuple[int, int] | None:
    """The FTS5 index of shard ``shard`` as (levels, segments), read from its structure record
    (after the cookie and the optional version-2 marker, the level count and the segment count
    as SQLite varints); ``None`` as for :func:`fts_levels`."""
    try:
        row = conn.execute(f"SELECT block FROM {fts_table(shard)}_data WHERE id = ?", (_STRUCTURE_ROWID,)).fetchone()
    except sqlite3.OperationalError:  # no such table: the shard was never created
        return None
    block = row[0] if row is not None else None
    if not isinstance(block, bytes) or len(block) < 5:
        return None
    at = 8 if block[4:8] == _STRUCTURE_V2 else 4
    levels = _varint(block, at)
    if levels is None:
        return None
    segments = _varint(block, levels[1])
    return None if segments is None else (levels[0], segments[0])


def _varint(block: bytes, at: int) -> tuple[int, int] | None:
    """The SQLite varint at ``block[at:]`` and the offset after it (``None`` if the block ends first)."""
    value = 0
    for i, byte in enumerate(block[at : at + 9]):
        if i == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + i + 1
    return None


def optimize_fts(conn: sqlite3.Connection, shard: int) -> None:
    """Rewrite shard ``shard``'s FTS5 index as one segment, so erased terms leave it (P24).

    Rebuilt from ``lines`` instead (the index holds exactly their terms) when its structure
    is, or the rewrite leaves it, deeper than :data:`FTS_MAX_LEVELS`.
    """
    table = fts_table(shard)  # shard < FTS_SHARDS: its own table
    levels = fts_levels(conn, shard)
    if levels is None or levels <= FTS_MAX_LEVELS:
        conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
        levels = fts_levels(conn, shard)
    if levels is not None and levels > FTS_MAX_LEVELS:
        _rebuild_fts(conn, shard)


def rebuild_deep_fts(conn: sqlite3.Connection) -> list[int]:
    """Rebuild every shard whose FTS5 index is deeper than :data:`FTS_MAX_LEVELS` (at open:
    a database an earlier release left deep, or past SQLite's limit, is readable again).

    :return: the shards rebuilt.
    """
    shards = [
        int(name.rsplit("_", 1)[1])
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'lines_fts_[0-9]*'"
            " AND name NOT GLOB 'lines_fts_*_*'"
        )
    ]
    deep = [shard for shard in sorted(shards) if (fts_levels(conn, shard) or 0) > FTS_MAX_LEVELS]
    for shard in deep:
        _rebuild_fts(conn, shard)
    return deep


@functools.lru_cache(maxsize=1)
def _empty_index() -> list[tuple[int, bytes]]:
    """The ``_data`` rows of a new, empty shard index, as this SQLite writes them."""
    scratch = sqlite3.connect(":memory:")
    try:
        scratch.execute(_FTS_DDL.format(name="empty"))
        return [(int(i), bytes(b)) for i, b in scratch.execute("SELECT id, block FROM empty_data ORDER BY id")]
    finally:
        scratch.close()


def _rebuild_fts(conn: sqlite3.Connection, shard: int) -> None:
    """Empty shard ``shard``'s FTS5 index and index its partitions' lines again, as one segment.

    An index too deep for SQLite to open at all (past its 2,000 levels) cannot take
    ``delete-all``: its data and segment tables are then set to those of a new, empty
    FTS5 index. Either way ``secure_delete`` zeroes the pages the old segments held.
    """
    table = fts_table(shard)  # shard < FTS_SHARDS: its own table
    try:
        conn.execute(f"INSERT INTO {table} ({table}) VALUES ('delete-all')")
    except sqlite3.DatabaseError:
        conn.execute(f"DELETE FROM {table}_idx")
        conn.execute(f"DELETE FROM {table}_data")
        conn.executemany(f"INSERT INTO {table}_data (id, block) VALUES (?, ?)", _empty_index())
    pids = [int(r[0]) for r in conn.execute("SELECT id FROM partitions WHERE id % ? = ?", (FTS_SHARDS, shard))]
    for pid in pids:
        low = pid << LINE_BITS
        conn.execute(
            f"INSERT INTO {table} (rowid, terms) SELECT id, terms FROM lines WHERE id BETWEEN ? AND ?",
            (low, low + (1 << LINE_BITS) - 1),
        )
    conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")


_V2: Final = """
CREATE TABLE partitions (
    id INTEGER PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('agent', 'crew')),
    owner_id TEXT NOT NULL,
    next_line INTEGER NOT NULL DEFAULT 1,
    UNIQUE (workspace_id, kind, owner_id)
);
CREATE TABLE documents (
    id INTEGER PRIMARY KEY,
    partition_id INTEGER NOT NULL REFERENCES partitions (id),
    workspace_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    crew_id TEXT NOT NULL DEFAULT '',
    tier TEXT NOT NULL,
    key TEXT NOT NULL DEFAULT '',
    label TEXT NOT NULL,
    body TEXT NOT NULL,
    size INTEGER NOT NULL,
    data_subject_id TEXT NOT NULL DEFAULT '',
    line_count INTEGER NOT NULL DEFAULT 0,
    term_count INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (partition_id, tier, key)
);
CREATE INDEX documents_by_subject ON documents (workspace_id, data_subject_id) WHERE data_subject_id != '';
CREATE TABLE lines (
    id INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES documents (id),
    line_no INTEGER NOT NULL,
    text TEXT NOT NULL,
    terms TEXT NOT NULL,
    length INTEGER NOT NULL
);
CREATE INDEX lines_by_document ON lines (document_id, line_no);
CREATE TABLE quarantine (
    id INTEGER PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    agent_id TEXT NOT NULL DEFAULT '',
    crew_id TEXT NOT NULL DEFAULT '',
    label TEXT NOT NULL,
    category TEXT NOT NULL,
    pattern TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX quarantine_by_digest ON quarantine (workspace_id, sha256);
CREATE TABLE probe (id INTEGER PRIMARY KEY);
"""


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


def partition_id(conn: sqlite3.Connection, workspace_id: str, kind: str, owner_id: str, *, create: bool) -> int | None:
    """The partition's id, created on first write when ``create``."""
    row = conn.execute(
        "SELECT id FROM partitions WHERE workspace_id = ? AND kind = ? AND owner_id = ?",
        (workspace_id, kind, owner_id),
    ).fetchone()
    if row is not None:
        return int(row[0])
    if not create:
        return None
    cur = conn.execute(
        "INSERT INTO partitions (workspace_id, kind, owner_id) VALUES (?, ?, ?)", (workspace_id, kind, owner_id)
    )
    pid = int(cur.lastrowid or 0)
    # Shards are created with their first partition, so a known partition always has its table.
    conn.execute(_FTS_DDL.format(name=fts_table(pid)))
    return pid


def reindex_document(
    conn: sqlite3.Connection, document_id: int, pid: int, old_body: str, new_body: str, *, update_counts: bool = True
) -> tuple[int, int]:
    """Bring the document's lines and their FTS entries from ``old_body`` to ``new_body``.

    Only lines whose text changed are touched, so an append re-indexes the
    last old line and the new ones, not the whole document.

    :param update_counts: add the changes to the document's ``line_count`` and
        ``term_count`` here; ``False`` leaves that to the caller's own UPDATE.
    :return: the change in indexed lines and in their total length in terms.
    """
    if new_body.startswith(old_body) and (not old_body or old_body.endswith("\n")):
        # An append after a complete line (the usual retain): the old lines stay as they are,
        # only the appended ones are indexed ("\n" cannot join the text after it into one line).
        offset = len(old_body.splitlines())
        added = new_body[len(old_body) :].splitlines()
        stale: list[int] = []
        fresh = list(range(offset + 1, offset + len(added) + 1))

        def new_line(n: int) -> str:
            return added[n - offset - 1]
    else:
        old_lines = old_body.splitlines()
        new_lines = new_body.splitlines()
        stale = [n for n in range(1, len(old_lines) + 1) if n > len(new_lines) or old_lines[n - 1] != new_lines[n - 1]]
        fresh = [n for n in range(1, len(new_lines) + 1) if n > len(old_lines) or old_lines[n - 1] != new_lines[n - 1]]

        def new_line(n: int) -> str:
            return new_lines[n - 1]

    lines_delta = terms_delta = 0
    if stale:
        removed, removed_terms = delete_lines(conn, document_id, stale)
        lines_delta -= removed
        terms_delta -= removed_terms
    if fresh:
        indexed = [il for n in fresh if (il := stored_line(n, new_line(n))) is not None]
        if indexed:
            row = conn.execute(
                "UPDATE partitions SET next_line = next_line + ? WHERE id = ? RETURNING next_line - ?",
                (len(indexed), pid, len(indexed)),
            ).fetchone()
            if int(row[0]) + len(indexed) >= 1 << LINE_BITS:
                raise UpstreamError(
                    f"partition {pid} has used all {1 << LINE_BITS} line numbers of its rowid range: export its "
                    "documents and retain them into a new database"
                )
            first = (pid << LINE_BITS) | int(row[0])
            rows = [(first + i, document_id, il.number, il.text, il.terms, il.length) for i, il in enumerate(indexed)]
            insert_line = "INSERT INTO lines (id, document_id, line_no, text, terms, length) VALUES (?, ?, ?, ?, ?, ?)"
            insert_terms = f"INSERT INTO {fts_table(pid)} (rowid, terms) VALUES (?, ?)"
            if len(rows) == 1:  # the usual append of one turn: execute is cheaper than executemany
                conn.execute(insert_line, rows[0])
                conn.execute(insert_terms, (rows[0][0], rows[0][4]))
            else:
                conn.executemany(insert_line, rows)
                conn.executemany(insert_terms, [(r[0], r[4]) for r in rows])
            lines_delta += len(indexed)
            terms_delta += sum(il.length for il in indexed)
    if update_counts and (lines_delta or terms_delta):
        conn.execute(
            "UPDATE documents SET line_count = line_count + ?, term_count = term_count + ? WHERE id = ?",
            (lines_delta, terms_delta, document_id),
        )
    return lines_delta, terms_delta


def delete_lines(conn: sqlite3.Connection, document_id: int, numbers: list[int] | None = None) -> tuple[int, int]:
    """Remove lines (all when ``numbers`` is None) from ``lines`` and from the contentless FTS index.

    :return: how many lines were removed and their total length in terms.
    """
    if numbers is None:
        rows = conn.execute("SELECT id, terms, length FROM lines WHERE document_id = ?", (document_id,)).fetchall()
    else:
        rows = []
        for n in numbers:
            rows.extend(
                conn.execute(
                    "SELECT id, terms, length FROM lines WHERE document_id = ? AND line_no = ?", (document_id, n)
                ).fetchall()
            )
    if not rows:
        return 0, 0
    # A contentless FTS5 table forgets a row only when told its exact terms.
    table = fts_table(rows[0][0] >> LINE_BITS)
    conn.executemany(f"INSERT INTO {table} ({table}, rowid, terms) VALUES ('delete', ?, ?)", [r[:2] for r in rows])
    conn.executemany("DELETE FROM lines WHERE id = ?", [(r[0],) for r in rows])
    # A line's vector is derived from its text: it goes with it, in the same transaction (P37, P24).
    conn.executemany("DELETE FROM line_vectors WHERE line_id = ?", [(r[0],) for r in rows])
    return len(rows), sum(int(r[2]) for r in rows)


def _create_v2(conn: sqlite3.Connection) -> None:
    for statement in _V2.split(";"):
        if statement.strip():
            conn.execute(statement)


def _from_v1(conn: sqlite3.Connection) -> None:
    """v1 -> v2: move bodies into the new tables and index their lines."""
    conn.execute("ALTER TABLE documents RENAME TO documents_v1")
    _create_v2(conn)
    stamp = now_iso()
    for workspace_id, agent_id, crew_id, tier_value, key, body, updated_at in conn.execute(
        "SELECT workspace_id, agent_id, crew_id, tier, key, body, updated_at FROM documents_v1 ORDER BY rowid"
    ).fetchall():
        tier = Tier(tier_value)
        kind, owner = ("crew", crew_id) if tier is Tier.CREW else ("agent", agent_id)
        pid = partition_id(conn, workspace_id, kind, owner, create=True)
        assert pid is not None
        cur = conn.execute(
            "INSERT INTO documents (partition_id, workspace_id, agent_id, crew_id, tier, key, label, body, size,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                pid,
                workspace_id,
                agent_id,
                crew_id,
                tier.value,
                key,
                label_for(tier, key),
                body,
                len(body.encode("utf-8")),
                updated_at or stamp,
                updated_at or stamp,
            ),
        )
        reindex_document(conn, int(cur.lastrowid or 0), pid, "", body)
    conn.execute("DROP TABLE documents_v1")


def _from_v2(conn: sqlite3.Connection) -> None:
    """v2 -> v3: quarantine copies carry the data subject of the rejected write."""
    conn.execute("ALTER TABLE quarantine ADD COLUMN data_subject_id TEXT NOT NULL DEFAULT ''")
    conn.execute(
        "CREATE INDEX quarantine_by_subject ON quarantine (workspace_id, data_subject_id) WHERE data_subject_id != ''"
    )


def _from_v3(conn: sqlite3.Connection) -> None:
    """v3 -> v4: every document carries its body's sha256."""
    conn.execute("ALTER TABLE documents ADD COLUMN sha256 TEXT NOT NULL DEFAULT ''")
    rows = conn.execute("SELECT id, body FROM documents").fetchall()
    conn.executemany("UPDATE documents SET sha256 = ? WHERE id = ?", [(body_sha256(body), doc) for doc, body in rows])


_V5: Final = """
CREATE TABLE document_subjects (
    document_id INTEGER NOT NULL REFERENCES documents (id),
    workspace_id TEXT NOT NULL,
    data_subject_id TEXT NOT NULL,
    PRIMARY KEY (document_id, data_subject_id)
) WITHOUT ROWID;
CREATE INDEX document_subjects_by_subject ON document_subjects (workspace_id, data_subject_id);
CREATE TABLE pending_erasures (
    id INTEGER PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    target TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX pending_erasures_by_target ON pending_erasures (workspace_id, target);
"""


def _from_v4(conn: sqlite3.Connection) -> None:
    """v4 -> v5: a document keeps every subject that wrote to it; erasures awaiting their scrub are recorded."""
    for statement in _V5.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute(
        "INSERT INTO document_subjects (document_id, workspace_id, data_subject_id)"
        " SELECT id, workspace_id, data_subject_id FROM documents WHERE data_subject_id != ''"
    )
    conn.execute("DROP INDEX documents_by_subject")
    conn.execute("UPDATE documents SET data_subject_id = '' WHERE data_subject_id != ''")


#: Schema v6, one statement each (a migration runs them inside its own transaction).
_V6: Final = (
    """CREATE TABLE tier_stats (
    partition_id INTEGER NOT NULL,
    tier TEXT NOT NULL,
    line_count INTEGER NOT NULL DEFAULT 0,
    term_count INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (partition_id, tier)
) WITHOUT ROWID""",
    """CREATE TRIGGER tier_stats_on_insert AFTER INSERT ON documents BEGIN
    INSERT INTO tier_stats (partition_id, tier, line_count, term_count)
    VALUES (new.partition_id, new.tier, new.line_count, new.term_count)
    ON CONFLICT (partition_id, tier) DO UPDATE
    SET line_count = line_count + excluded.line_count, term_count = term_count + excluded.term_count;
END""",
    # A retain changes a document's counts in place: one UPDATE of the deltas (the row exists:
    # the document's insert made it).
    """CREATE TRIGGER tier_stats_on_update AFTER UPDATE OF line_count, term_count ON documents
WHEN old.partition_id = new.partition_id AND old.tier = new.tier
    AND (old.line_count != new.line_count OR old.term_count != new.term_count) BEGIN
    UPDATE tier_stats SET line_count = line_count + new.line_count - old.line_count,
        term_count = term_count + new.term_count - old.term_count
    WHERE partition_id = new.partition_id AND tier = new.tier;
END""",
    # Nothing moves a document to another partition or tier; if anything ever does, the totals follow.
    """CREATE TRIGGER tier_stats_on_move AFTER UPDATE OF partition_id, tier ON documents
WHEN old.partition_id != new.partition_id OR old.tier != new.tier BEGIN
    UPDATE tier_stats SET line_count = line_count - old.line_count, term_count = term_count - old.term_count
    WHERE partition_id = old.partition_id AND tier = old.tier;
    INSERT INTO tier_stats (partition_id, tier, line_count, term_count)
    VALUES (new.partition_id, new.tier, new.line_count, new.term_count)
    ON CONFLICT (partition_id, tier) DO UPDATE
    SET line_count = line_count + excluded.line_count, term_count = term_count + excluded.term_count;
END""",
    """CREATE TRIGGER tier_stats_on_delete AFTER DELETE ON documents BEGIN
    UPDATE tier_stats SET line_count = line_count - old.line_count, term_count = term_count - old.term_count
    WHERE partition_id = old.partition_id AND tier = old.tier;
END""",
)


def _from_v5(conn: sqlite3.Connection) -> None:
    """v5 -> v6: each partition's and tier's line and term totals, kept by triggers."""
    for statement in _V6:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO tier_stats (partition_id, tier, line_count, term_count)"
        " SELECT partition_id, tier, sum(line_count), sum(term_count) FROM documents GROUP BY partition_id, tier"
    )


#: Schema v7, one statement each.
_V7: Final = (
    # Every existing line waits for a vector: the column's default.
    "ALTER TABLE lines ADD COLUMN needs_vector INTEGER NOT NULL DEFAULT 1",
    "CREATE INDEX IF NOT EXISTS lines_without_vector ON lines (id) WHERE needs_vector = 1",
    """CREATE TABLE IF NOT EXISTS line_vectors (
    line_id INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    digest TEXT NOT NULL,
    vector BLOB NOT NULL
)""",
    # The lines whose vector is of another model than the one asked for: two range scans.
    "CREATE INDEX IF NOT EXISTS line_vectors_by_model ON line_vectors (model)",
)


def _from_v6(conn: sqlite3.Connection) -> None:
    """v6 -> v7: a vector per indexed line, and which lines still wait for one.

    Idempotent: a file set back to an older version number with these kept upgrades again.
    """
    has_column = any(row[1] == "needs_vector" for row in conn.execute("PRAGMA table_info(lines)"))
    for statement in _V7[1:] if has_column else _V7:
        conn.execute(statement)


#: Schema v8, one statement each.
_V8: Final = (
    "ALTER TABLE documents ADD COLUMN expires_at TEXT",
    "ALTER TABLE documents ADD COLUMN purge_at TEXT",
    # The sweep and health find what is due without a scan; a recall subtracts a partition's expired
    # documents from its statistics through the second.
    "CREATE INDEX IF NOT EXISTS documents_by_purge ON documents (purge_at) WHERE purge_at IS NOT NULL",
    # Covering (tier and counts): a recall's subtraction reads the index alone, not each document's row.
    "CREATE INDEX IF NOT EXISTS documents_expiring ON documents (partition_id, purge_at, tier, line_count, term_count)"
    " WHERE purge_at IS NOT NULL",
    # The retention sweep's cutoffs: a tier's documents whose last write is older than the cutoff.
    "CREATE INDEX IF NOT EXISTS documents_by_write ON documents (tier, updated_at)",
    "ALTER TABLE quarantine ADD COLUMN expires_at TEXT",
    "CREATE INDEX IF NOT EXISTS quarantine_by_expiry ON quarantine (expires_at) WHERE expires_at IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS idempotency_keys (
    workspace_id TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    result_id TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    warning TEXT NOT NULL DEFAULT '',
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, key)
) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS idempotency_keys_by_age ON idempotency_keys (recorded_at)",
    "CREATE TABLE IF NOT EXISTS swept_shards (shard INTEGER PRIMARY KEY)",
)


def _from_v7(conn: sqlite3.Connection) -> None:
    """v7 -> v8: expiry and purge times, quarantine expiry, idempotency keys, shards a sweep left.

    Every document of v7 has neither an explicit expiry nor a purge time (NULL): the retention
    sweep's cutoffs reach those written before a policy existed. Idempotent like :func:`_from_v6`.
    """
    columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(documents)")}
    quarantine_columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(quarantine)")}
    for statement in _V8:
        if statement.startswith("ALTER TABLE documents ADD COLUMN") and statement.split()[5] in columns:
            continue
        if statement.startswith("ALTER TABLE quarantine ADD COLUMN") and "expires_at" in quarantine_columns:
            continue
        conn.execute(statement)


def tag_document(conn: sqlite3.Connection, document_id: int, workspace_id: str, subject: str) -> None:
    """Add ``subject`` to the subjects the document carries (P13); a tag is never removed by a write."""
    conn.execute(
        "INSERT OR IGNORE INTO document_subjects (document_id, workspace_id, data_subject_id) VALUES (?, ?, ?)",
        (document_id, workspace_id, subject),
    )


def delete_document(conn: sqlite3.Connection, document_id: int) -> None:
    """Remove a document with its lines, index entries and subject tags."""
    delete_lines(conn, document_id)
    conn.execute("DELETE FROM document_subjects WHERE document_id = ?", (document_id,))
    conn.execute("DELETE FROM documents WHERE id = ?", (document_id,))


#: ``MIGRATIONS[v]`` brings a version ``v`` database to version ``v + 1``.
MIGRATIONS: Final[dict[int, Callable[[sqlite3.Connection], None]]] = {
    1: _from_v1,
    2: _from_v2,
    3: _from_v3,
    4: _from_v4,
    5: _from_v5,
    6: _from_v6,
    7: _from_v7,
}


def migrate(conn: sqlite3.Connection) -> int:
    """Create or upgrade the schema; the caller holds a write transaction.

    :return: the version the database had before.
    :raises ValueError: for a version newer than :data:`SCHEMA_VERSION`.
    """
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise ValueError(version)
    start = version
    if version == 0:
        _create_v2(conn)
        start = 2
    for v in range(start, SCHEMA_VERSION):
        MIGRATIONS[v](conn)
    if version != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return version
