"""The ``sqlite`` provider: one database file, WAL, a line-level FTS5 index.

This module holds the hook implementations (the verbs). The connections, the
writer path (group commit), busy retries, error translation and the health
probe live in :mod:`memvault_sqlite.connection`; the scrub that finishes
erasures in :mod:`memvault_sqlite.scrub`; the schema and its migrations in
:mod:`memvault_sqlite.schema`; index terms and ranking in
:mod:`memvault_sqlite.search`.
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
import math
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final

import attrs

from memvault import current_stored_check
from memvault import search as text
from memvault.contract import clock, wire
from memvault.contract.embedding import PendingLine, QueryVector, line_digest, vectors_from_bytes
from memvault.contract.errors import IdempotencyConflict, InvalidRequest, MemvaultError, UpstreamError
from memvault.contract.models import (
    Capability,
    DocumentInfo,
    ForgetRequest,
    ForgetResult,
    HealthStatus,
    ListDocumentsRequest,
    ListDocumentsResult,
    ReadRequest,
    ReadResult,
    RecallRequest,
    RecallResult,
    RecallSnippet,
    RetainRequest,
    RetainResult,
    check_cap,
    effective_expiry,
)
from memvault.contract.models import QuarantineRecord as _QuarantineRecord
from memvault.contract.retention import SweepRequest, SweepResult
from memvault.hooks.markers import hookimpl
from memvault.search import Candidate, index_terms, rank_candidates
from memvault_sqlite import schema
from memvault_sqlite.connection import MEMORY, Database, newer_message, translated
from memvault_sqlite.merge import Merger
from memvault_sqlite.scrub import BACKGROUND_BUSY_MS, Scrubber
from memvault_sqlite.search import CANDIDATE_BUDGET, first_fitting, fts_query, likely_first_fitting, narrowed_queries

__all__ = ["MEMORY", "SqliteProvider"]

log = logging.getLogger("memvault_sqlite")

_OUR_TABLES: Final = frozenset(
    {
        "partitions",
        "documents",
        "lines",
        "quarantine",
        "probe",
        "document_subjects",
        "pending_erasures",
        "tier_stats",
        "line_vectors",
        "idempotency_keys",
        "swept_shards",
    }
)
#: A sweep deletes expired documents in transactions of at most this many documents ...
SWEEP_BATCH_DOCUMENTS: Final = 64
#: ... or of about this many lines, so a recall or a write never waits long for the writer turn.
SWEEP_BATCH_LINES: Final = 512
#: After each batch the sweep pauses this fraction of the batch's time: recalls in this process get the
#: interpreter and a core between batches (a sweep is background work; it takes that much longer).
SWEEP_PAUSE: Final = 0.5


class SqliteProvider:
    """memvault documents in one SQLite database.

    :param path: the database file, created with its schema on first open
        (``:memory:`` for a private in-memory database, for tests).
    :param timeout: seconds a transaction waits for another process's write
        lock (or a non-batched write for its turn behind this process's writers)
        before giving up with :class:`~memvault.errors.UpstreamError`.
    :param synchronous: ``full`` (default: an acknowledged retain survives power
        loss) or ``normal`` (survives a process crash; faster commits).
    :param scrub_wait: seconds a forget waits for readers to leave the write-ahead
        log so the erased text can be scrubbed from it; after that the forget
        answers ``pending=True`` and the scrub finishes later (contract P24).
    :param idle_merge: seconds a shard of the search index goes without a write
        from this vault before a background thread merges the segments the
        writes left, in short bounded steps (:mod:`memvault_sqlite.merge`);
        ``0`` turns it off (:meth:`merge_index` still merges on demand).
    """

    capabilities: Final = frozenset(
        {
            Capability.MULTI_PROCESS,
            Capability.DURABLE,
            Capability.CASCADE_FORGET,
            Capability.QUARANTINE,
            Capability.LIST_DOCUMENTS,
            Capability.CHECKS_STORED,
            Capability.VECTORS,
            Capability.EXPIRY,
            Capability.IDEMPOTENT_WRITES,
        }
    )

    def __init__(
        self,
        path: str = "memvault.db",
        timeout: float = 10.0,
        synchronous: str = "full",
        scrub_wait: float = 2.0,
        idle_merge: float = 1.0,
    ) -> None:
        if not 0 <= scrub_wait < math.inf:  # nan fails it too
            raise InvalidRequest("scrub_wait must be zero or a positive, finite number of seconds", field="scrub_wait")
        if not 0 <= idle_merge < math.inf:
            raise InvalidRequest(
                "idle_merge must be zero (no merging) or a positive, finite number of seconds", field="idle_merge"
            )
        self.db = Database(path, timeout=timeout, synchronous=synchronous)
        self.scrub_wait = float(scrub_wait)
        self._scrubber = Scrubber(self.db)
        self._merger = Merger(self.db, float(idle_merge))
        #: A retain inside a write group found erasures awaiting their scrub: finish them after it.
        self._scrub_after_group = False
        try:
            with self.db.translating("open"):
                self._open_schema()
                if not self.db.memory:
                    self.db.remember_identity()
                    # An erasure a crashed or busy process left unscrubbed is finished now, or soon.
                    self._scrubber.finish(wait=0.0, busy_ms=BACKGROUND_BUSY_MS)
        except BaseException:
            self.close()
            raise

    @property
    def path(self) -> str:
        """The database file's absolute path (``:memory:`` for an in-memory database)."""
        return self.db.path

    @property
    def timeout(self) -> float:
        return self.db.timeout

    @property
    def synchronous(self) -> str:
        return self.db.synchronous

    def _open_schema(self) -> None:
        db = self.db
        conn = db.conn()

        def setup() -> int:
            if not db.memory:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise UpstreamError(f"{self.path}: SQLite refused WAL mode (got {mode!r})")
            with db.write(conn, "open"):
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                if version == 0:
                    foreign = {
                        r[0]
                        for r in conn.execute(
                            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
                            " AND name NOT LIKE 'lines_fts%'"
                        )
                    } - _OUR_TABLES
                    if foreign:
                        raise InvalidRequest(
                            f"{self.path} is a SQLite database of another application (it has tables "
                            f"{', '.join(sorted(foreign)[:5])}): point path at a new file or a memvault database",
                            field="path",
                        )
                try:
                    version = schema.migrate(conn)
                except ValueError as exc:
                    raise UpstreamError(newer_message(self.path, int(exc.args[0]))) from None
                rebuilt = schema.rebuild_deep_fts(conn)
                if rebuilt:
                    log.warning(
                        "sqlite database %s: rebuilt the search index of shard(s) %s, which had grown too deep",
                        self.path,
                        ", ".join(map(str, rebuilt)),
                    )
                return version

        db.retry(setup, "open")

    @translated("close")
    def close(self) -> None:
        """Stop the background scrub and merging, and close every connection this provider opened. Idempotent."""
        self._scrubber.stop()
        self._merger.stop()
        self.db.close()

    @translated("merge")
    def merge_index(self) -> int:
        """Merge every shard's search-index segments now, as the idle merge does in the background.

        For after a bulk load, or with ``idle_merge = 0``: recall then visits one segment per
        level instead of the dozen or more that many small writes leave. Each step is a short
        transaction of its own, in this process's writer turn. An in-memory database is left
        as it is.

        :return: the merge steps taken (0: nothing needed merging).
        """
        self.db.conn()  # a closed provider says so
        if self.db.memory:
            return 0
        steps = 0
        for shard in range(schema.FTS_SHARDS):
            step = functools.partial(self._merger.step, shard, busy_ms=int(self.db.timeout * 1000))
            while not self.db.retry(step, "merge"):
                steps += 1
        return steps

    # -- verbs -----------------------------------------------------------------

    @hookimpl
    @translated("retain")
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        label = ref.label
        # The scanner's check of the stored body (capability checks_stored), taken on the caller's
        # thread: the write below may run on the group-commit writer thread.
        check = current_stored_check()

        idempotency_key = request.idempotency_key
        fingerprint = request.fingerprint() if idempotency_key else ""

        def write(conn: sqlite3.Connection) -> tuple[RetainResult, bool, int | None]:
            # Runs in the writer thread's transaction (group commit), under its own SAVEPOINT. The
            # time is read here, under the write lock: writes are stamped in the order they commit.
            now = clock.now()
            stamp = _iso(now)
            part = ref.partition
            if idempotency_key:
                # The key is recorded in this transaction with the write (P44): under the write lock,
                # a repeat (another thread's, process's, or this batch's) finds it committed or not at all.
                recorded = conn.execute(
                    "SELECT fingerprint, result_id, bytes, warning FROM idempotency_keys"
                    " WHERE workspace_id = ? AND key = ?",
                    (part.workspace_id, idempotency_key),
                ).fetchone()
                if recorded is not None:
                    if recorded[0] != fingerprint:
                        raise IdempotencyConflict(key=idempotency_key, workspace_id=part.workspace_id)
                    # Nothing is written, so no body to scan (the first write's was): tell the check,
                    # which may be this caller's, called here on the writer thread (P29, P44).
                    skip = getattr(check, "nothing_written", None)
                    if callable(skip):
                        skip()
                    return RetainResult(id=recorded[1], bytes=int(recorded[2]), warning=recorded[3]), False, None
            # One statement finds the partition, the document and whether erasures await their scrub
            # (nothing can add one while this transaction holds the write lock).
            found = conn.execute(
                "SELECT p.id, d.id, d.body, d.size, EXISTS (SELECT 1 FROM pending_erasures), d.sha256,"
                " d.expires_at, d.purge_at"
                " FROM partitions AS p"
                " LEFT JOIN documents AS d ON d.partition_id = p.id AND d.tier = ? AND d.key = ?"
                " WHERE p.workspace_id = ? AND p.kind = ? AND p.owner_id = ?",
                (ref.tier.value, ref.key, part.workspace_id, part.kind, part.owner_id),
            ).fetchone()
            if found is not None and found[1] is not None and found[7] is not None and found[7] <= stamp:
                # Expired (P41): absent already. The write starts a new document; the old one goes as
                # a sweep removes it (its shard's index is rewritten by the next sweep).
                _remove_expired(conn, int(found[1]))
                found = (*found[:1], None, None, None, found[4], None, None, None)
            live = found is not None and found[1] is not None
            explicit = _explicit_expiry(request, _parse(found[6]) if live else None, live)
            if request.mode == "append":
                # Before anything is written: a rejection (ContentRejected) rolls back this write's
                # SAVEPOINT alone and reaches its caller; no partition, document or tag is left.
                check(found[2] if live else "", (found[5] or "") if live else "")
            if found is None:
                new_pid = schema.partition_id(conn, part.workspace_id, part.kind, part.owner_id, create=True)
                assert new_pid is not None
                pid, doc, old_body, current, pending = new_pid, None, "", 0, _any_pending(conn)
            else:
                pid, doc, pending = int(found[0]), found[1], bool(found[4])
                old_body, current = (found[2], int(found[3])) if doc is not None else ("", 0)
            body = old_body + request.content if request.mode == "append" else request.content
            size = len(body.encode("utf-8"))
            warning = check_cap(request.tier, current=current, projected=size)
            expires = _iso(explicit) if explicit is not None else None
            purge = effective_expiry(explicit, now, request.retention)
            purge_at = _iso(purge) if purge is not None else None
            if doc is None:
                cur = conn.execute(
                    "INSERT INTO documents (partition_id, workspace_id, agent_id, crew_id, tier, key, label,"
                    " body, size, data_subject_id, created_at, updated_at, sha256, expires_at, purge_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        pid,
                        part.workspace_id,
                        request.agent_id if part.kind == "agent" else "",
                        request.crew_id if part.kind == "crew" else "",
                        ref.tier.value,
                        ref.key,
                        label,
                        body,
                        size,
                        "",
                        stamp,
                        stamp,
                        schema.body_sha256(body),
                        expires,
                        purge_at,
                    ),
                )
                doc_id = int(cur.lastrowid or 0)
                schema.reindex_document(conn, doc_id, pid, old_body, body)
            else:
                doc_id = int(doc)
                # The line index first, then one UPDATE of the row: body, digest and the new counts.
                lines_delta, terms_delta = schema.reindex_document(
                    conn, doc_id, pid, old_body, body, update_counts=False
                )
                conn.execute(
                    "UPDATE documents SET body = ?, size = ?, updated_at = ?, sha256 = ?, expires_at = ?, purge_at = ?,"
                    " line_count = line_count + ?, term_count = term_count + ? WHERE id = ?",
                    (body, size, stamp, schema.body_sha256(body), expires, purge_at, lines_delta, terms_delta, doc_id),
                )
            if request.data_subject_id:
                schema.tag_document(conn, doc_id, part.workspace_id, request.data_subject_id)
            if idempotency_key:
                conn.execute(
                    "INSERT INTO idempotency_keys (workspace_id, key, fingerprint, result_id, bytes, warning,"
                    " recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (part.workspace_id, idempotency_key, fingerprint, label, size, warning, stamp),
                )
            return RetainResult(id=label, bytes=size, warning=warning), pending, pid

        result, pending, pid = self.db.commit(write, "retain")
        if pid is None:
            return result  # a repeat of a recorded write: nothing was written
        self._merger.wrote(pid % schema.FTS_SHARDS)
        if pending:
            if self.db.in_group():
                self._scrub_after_group = True  # the scrub needs the writer turn the group holds
            else:
                # The next write is an opportunity to finish an erasure (P24).
                self._scrubber.finish(wait=0.0, busy_ms=BACKGROUND_BUSY_MS)
        return result

    @hookimpl
    def memvault_write_group(self) -> AbstractContextManager[None]:
        """The retains this thread makes inside commit in one transaction (P34)."""
        return self._write_group()

    @contextmanager
    def _write_group(self) -> Iterator[None]:
        with self.db.group("retain"):
            yield
        if self._scrub_after_group and not self.db.in_group():
            self._scrub_after_group = False
            self._scrubber.finish(wait=0.0, busy_ms=BACKGROUND_BUSY_MS)

    @hookimpl
    @translated("recall")
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        query = text.Query.parse(request.query)
        terms = index_terms(query)
        vector = request.vector
        if not terms and vector is None:
            return RecallResult(hits=[])
        match = fts_query(terms) if terms else ""
        # Fused with the lines closest in meaning (P36): the lexical ranking FUSION_DEPTH deep.
        depth = text.FUSION_DEPTH if vector is not None else request.limit

        def search() -> RecallResult:
            conn = self.db.conn()
            # Lines of documents expired at this moment are absent (P41), inside every statement.
            # One read transaction: the statistics, the candidates, the texts and the digests see one snapshot.
            # A scrub of erased text may hold new ones back briefly (scrub.READER_HOLD): it needs a moment
            # with no reader, which recalls that overlap (busy readers, by meaning) never leave.
            with self._scrubber.readers.reading():
                return search_in_transaction(conn)

        def search_in_transaction(conn: sqlite3.Connection) -> RecallResult:
            now = _iso(clock.now())
            rows: list[Candidate] = []
            line_count = term_count = 0
            searched: list[tuple[int, tuple[str, ...]]] = []
            conn.execute("BEGIN")
            try:
                for partition, tiers in request.scopes():
                    tier_values = tuple(t.value for t in tiers)
                    marks = ", ".join("?" * len(tier_values))
                    found = conn.execute(
                        # The totals the triggers keep per tier (schema v6): one row per tier searched.
                        "SELECT p.id, coalesce(sum(s.line_count), 0), coalesce(sum(s.term_count), 0)"
                        " FROM partitions AS p LEFT JOIN tier_stats AS s"
                        f" ON s.partition_id = p.id AND s.tier IN ({marks})"
                        " WHERE p.workspace_id = ? AND p.kind = ? AND p.owner_id = ? GROUP BY p.id",
                        (*tier_values, partition.workspace_id, partition.kind, partition.owner_id),
                    ).fetchone()
                    if found is None:
                        continue
                    # Less the lines of the partition's expired documents not swept yet (a range of
                    # the partial index on purge_at): the statistics are those of the live lines.
                    expired = conn.execute(
                        "SELECT coalesce(sum(line_count), 0), coalesce(sum(term_count), 0) FROM documents"
                        f" INDEXED BY documents_expiring WHERE partition_id = ? AND purge_at IS NOT NULL"
                        f" AND purge_at <= ? AND tier IN ({marks})",
                        (int(found[0]), now, *tier_values),
                    ).fetchone()
                    line_count += int(found[1]) - int(expired[0])
                    term_count += int(found[2]) - int(expired[1])
                    searched.append((int(found[0]), tier_values))
                df: list[int] | None = None
                budget = CANDIDATE_BUDGET
                for pid, tier_values in searched if terms else ():
                    rows.extend(_candidates(conn, pid, tier_values, match, None, now, probe=budget + 1 - len(rows)))
                if len(rows) > budget:
                    # Many lines share a term (common words, a long history): count each term's lines,
                    # then score only the lines a narrower query keeps (see narrowed_queries).
                    df = [sum(_count(conn, pid, tiers, fts_query([t]), now) for pid, tiers in searched) for t in terms]
                    narrower = narrowed_queries(terms, df)
                    wider, chosen, fits = match, match, False
                    if narrower:
                        # The first narrower query that fits, counting from the likely one (counts are dear).
                        k, fits = first_fitting(
                            lambda k: sum(_count(conn, pid, tiers, narrower[k], now) for pid, tiers in searched),
                            len(narrower),
                            likely_first_fitting(df, line_count),
                        )
                        wider, chosen = narrower[k - 1] if k else match, narrower[k]
                    rows = []
                    for pid, tier_values in searched:
                        # Still too many (one common word, or lines holding every term abound): the
                        # shortest lines, which BM25's length norm ranks first among equals.
                        rows.extend(_candidates(conn, pid, tier_values, chosen, None if fits else budget, now))
                    if not fits:
                        rows = sorted(rows, key=lambda row: (row[5], row[0]))[:budget]
                    elif len(rows) < depth:
                        # Fewer lines than asked for (a rare term and no line holding them all): the
                        # wider query's shortest other lines fill the budget.
                        have = {row[0] for row in rows}
                        more: list[Candidate] = []
                        for pid, tier_values in searched:
                            more.extend(_candidates(conn, pid, tier_values, wider, budget, now))
                        more = [row for row in sorted(more, key=lambda row: (row[5], row[0])) if row[0] not in have]
                        rows.extend(more[: budget - len(rows)])

                def texts(ids: Sequence[int]) -> dict[int, tuple[str, str]]:
                    """Each line's text and its document's digest (so the scanner needs no read-back)."""
                    found: dict[int, tuple[str, str]] = {}
                    for chunk in range(0, len(ids), 500):
                        part = ids[chunk : chunk + 500]
                        found.update(
                            (lid, (line, digest))
                            for lid, line, digest in conn.execute(
                                "SELECT l.id, l.text, d.sha256 FROM lines AS l JOIN documents AS d"
                                f" ON d.id = l.document_id WHERE l.id IN ({', '.join('?' * len(part))})",
                                part,
                            )
                        )
                    return found

                hits = rank_candidates(
                    query, rows, line_count=line_count, term_count=term_count, limit=depth, texts=texts, df=df
                )
                if vector is not None:
                    hits = _fused(conn, query, vector, searched, hits, texts, request.limit, now)
            finally:
                conn.execute("COMMIT")
            return RecallResult(hits=hits)

        return self.db.retry(search, "recall")

    # -- vectors (P37) ---------------------------------------------------------

    @hookimpl
    @translated("vectors")
    def memvault_vectors_pending(self, model_id: str, limit: int) -> list[PendingLine]:
        def pending() -> list[PendingLine]:
            conn = self.db.conn()
            conn.execute("BEGIN")  # one snapshot for both look-ups
            try:
                # Lines without any vector (the partial index holds only those), then lines whose
                # vector is of another model (two ranges of the model index: no scan either way).
                rows = conn.execute(
                    "SELECT id, text FROM lines WHERE needs_vector = 1 ORDER BY id LIMIT ?", (limit,)
                ).fetchall()
                for clause in ("model < ?", "model > ?"):
                    if len(rows) < limit:
                        rows += conn.execute(
                            "SELECT l.id, l.text FROM line_vectors AS v JOIN lines AS l ON l.id = v.line_id"
                            f" WHERE v.{clause} LIMIT ?",
                            (model_id, limit - len(rows)),
                        ).fetchall()
            finally:
                conn.execute("COMMIT")
            return [PendingLine(key=f"{line_id}:{line_digest(line)}", text=line) for line_id, line in rows]

        return self.db.retry(pending, "vectors")

    @hookimpl
    @translated("vectors")
    def memvault_vectors_store(self, model_id: str, vectors: list[tuple[str, bytes]]) -> int:
        wanted: dict[int, tuple[str, bytes]] = {}
        for key, blob in vectors:
            line_id, _, digest = str(key).partition(":")
            if line_id.isdigit() and digest and isinstance(blob, (bytes, bytearray, memoryview)) and len(blob):
                wanted[int(line_id)] = (digest, bytes(blob))

        def store(conn: sqlite3.Connection) -> int:
            stored = 0
            ids = list(wanted)
            for chunk in range(0, len(ids), 500):
                part = ids[chunk : chunk + 500]
                found = conn.execute(
                    f"SELECT id, text FROM lines WHERE id IN ({', '.join('?' * len(part))})", part
                ).fetchall()
                # A line that changed was deleted and indexed again under a new id; the digest checks the
                # text too: a key whose line changed or went since stores nothing (P37).
                rows = [
                    (line_id, model_id, wanted[line_id][0], wanted[line_id][1])
                    for line_id, line in found
                    if line_digest(line) == wanted[line_id][0]
                ]
                # One vector per line: a vector of another model is replaced.
                conn.executemany(
                    "INSERT INTO line_vectors (line_id, model, digest, vector) VALUES (?, ?, ?, ?)"
                    " ON CONFLICT (line_id) DO UPDATE SET model = excluded.model, digest = excluded.digest,"
                    " vector = excluded.vector",
                    rows,
                )
                conn.executemany("UPDATE lines SET needs_vector = 0 WHERE id = ?", [(r[0],) for r in rows])
                stored += len(rows)
            return stored

        if not wanted:
            return 0
        return self.db.commit(store, "vectors")

    @hookimpl
    @translated("vectors")
    def memvault_vectors_backlog(self, model_id: str) -> int:
        def backlog() -> int:
            row = (
                self.db.conn()
                .execute(
                    "SELECT (SELECT count(*) FROM lines WHERE needs_vector = 1)"
                    " + (SELECT count(*) FROM line_vectors WHERE model < ?)"
                    " + (SELECT count(*) FROM line_vectors WHERE model > ?)",
                    (model_id, model_id),
                )
                .fetchone()
            )
            return int(row[0])

        return self.db.retry(backlog, "vectors")

    @hookimpl
    @translated("read")
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        ref = request.ref

        def read() -> ReadResult:
            row = (
                self.db.conn()
                .execute(
                    "SELECT d.body FROM documents AS d JOIN partitions AS p ON p.id = d.partition_id"
                    " WHERE p.workspace_id = ? AND p.kind = ? AND p.owner_id = ? AND d.tier = ? AND d.key = ?"
                    f" AND {_LIVE}",
                    (*ref.columns, _iso(clock.now())),
                )
                .fetchone()
            )
            return ReadResult(id=ref.label, content=row[0] if row else "")

        return self.db.retry(read, "read")

    @hookimpl
    @translated("forget")
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        target = _erasure_target(request)

        def erase() -> tuple[int, bool, bool]:
            conn = self.db.conn()
            with self.db.write(conn, "forget"):
                now = _iso(clock.now())
                if request.id:
                    ref = request.ref
                    rows = conn.execute(
                        "SELECT d.id, d.partition_id, d.purge_at FROM documents AS d JOIN partitions AS p"
                        " ON p.id = d.partition_id"
                        " WHERE p.workspace_id = ? AND p.kind = ? AND p.owner_id = ? AND d.tier = ? AND d.key = ?",
                        ref.columns,
                    ).fetchall()
                else:
                    # Exact match (P13): '=' on TEXT compares bytes; no LIKE, no case folding.
                    rows = conn.execute(
                        "SELECT DISTINCT d.id, d.partition_id, d.purge_at FROM document_subjects AS s"
                        " JOIN documents AS d ON d.id = s.document_id"
                        " WHERE s.workspace_id = ? AND s.data_subject_id = ?",
                        (request.workspace_id, request.data_subject_id),
                    ).fetchall()
                quarantined = 0
                if request.data_subject_id:
                    # Quarantine copies are derived data too (P24): those of the subject's rejected writes,
                    # and those of rejected appends to a document erased here (a copy is the final body,
                    # so it holds the document's text), whoever wrote them.
                    quarantined = conn.execute(
                        "DELETE FROM quarantine WHERE workspace_id = ? AND (data_subject_id = ? OR EXISTS ("
                        " SELECT 1 FROM document_subjects AS s JOIN documents AS d ON d.id = s.document_id"
                        " WHERE s.workspace_id = quarantine.workspace_id AND s.data_subject_id = ?"
                        " AND d.label = quarantine.label AND d.agent_id = quarantine.agent_id"
                        " AND d.crew_id = quarantine.crew_id))",
                        (request.workspace_id, request.data_subject_id, request.data_subject_id),
                    ).rowcount
                for doc_id, _pid, _purge in rows:
                    schema.delete_document(conn, doc_id)
                # Rewrite each FTS shard that held the text as one segment: the erased
                # terms leave the index instead of lingering under delete markers, and
                # secure_delete zeroes the pages the old segments freed.
                for shard in sorted({pid % schema.FTS_SHARDS for _doc, pid, _purge in rows}):
                    schema.optimize_fts(conn, shard)
                if (rows or quarantined) and not self.db.memory:
                    # Recorded in the transaction that deletes the rows: if the process dies
                    # before the scrub below, the next open (or any other process) finishes it.
                    conn.execute(
                        "INSERT INTO pending_erasures (workspace_id, target, created_at) VALUES (?, ?, ?)",
                        (request.workspace_id, target, schema.now_iso()),
                    )
                mine = conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM pending_erasures WHERE workspace_id = ? AND target = ?)",
                    (request.workspace_id, target),
                ).fetchone()[0]
                # An expired document is absent (P41): removed here all the same, but not counted.
                live = sum(1 for _doc, _pid, purge in rows if purge is None or purge > now)
                return live, bool(mine), _any_pending(conn)

        removed, mine, anything = self.db.retry(erase, "forget")
        pending = False
        if anything:
            # Our own erasure (or a retry of it) waits for readers up to scrub_wait; a forget
            # of something else only takes the opportunity to finish older ones.
            if mine:
                done = self._scrubber.finish(wait=self.scrub_wait)
            else:
                done = self._scrubber.finish(wait=0.0, busy_ms=BACKGROUND_BUSY_MS)
            pending = mine and not done
        return ForgetResult(removed=removed, pending=pending)

    @hookimpl
    @translated("health")
    def memvault_health(self) -> HealthStatus:
        status = self.db.health()
        if not status.ok:
            return status
        try:
            overdue = self.db.retry(self._overdue, "health")
        except MemvaultError as exc:
            return HealthStatus(ok=False, message=str(exc))
        return attrs.evolve(status, retention_overdue=overdue) if overdue else status

    def _overdue(self) -> int:
        """Documents expired and not swept yet: a range of the partial index on ``purge_at`` (P43)."""
        row = (
            self.db.conn()
            .execute(
                "SELECT count(*) FROM documents INDEXED BY documents_by_purge"
                " WHERE purge_at IS NOT NULL AND purge_at <= ?",
                (_iso(clock.now()),),
            )
            .fetchone()
        )
        return int(row[0])

    @hookimpl
    @translated("list_documents")
    def memvault_list_documents(self, request: ListDocumentsRequest) -> ListDocumentsResult:
        where: list[str] = []
        params: list[str] = []
        for column, value in (
            ("workspace_id", request.workspace_id),
            ("tier", request.tier.value if request.tier else ""),
        ):
            if value:
                where.append(f"{column} = ?")
                params.append(value)
        owners = [(c, v) for c, v in (("agent_id", request.agent_id), ("crew_id", request.crew_id)) if v]
        if owners:
            where.append("(" + " OR ".join(f"{column} = ?" for column, _ in owners) + ")")
            params.extend(value for _, value in owners)
        # An expired document is absent (P41).
        where.append(_LIVE)
        sql = f"SELECT {_INFO_COLUMNS} FROM documents AS d WHERE " + " AND ".join(where)

        def listing() -> ListDocumentsResult:
            conn = self.db.conn()
            conn.execute("BEGIN")  # one snapshot for the rows and their subjects
            try:
                rows = conn.execute(sql, [*params, _iso(clock.now())]).fetchall()
                documents = [_info(conn, row) for row in rows]
            finally:
                conn.execute("COMMIT")
            return ListDocumentsResult(documents=documents)

        return self.db.retry(listing, "list_documents")

    # -- memory over time (P41-P45) -------------------------------------------

    @hookimpl
    @translated("sweep_expired")
    def memvault_sweep_expired(self, request: SweepRequest) -> SweepResult:
        """Expired documents go in short transactions through the erasure path (index rows, vectors,
        subject tags, tier statistics); the search-index shards they leave are rewritten and the
        write-ahead log scrubbed once the last batch is done (P24, P43)."""
        now = _iso(request.now)

        def due() -> tuple[list[tuple[DocumentInfo, int, int]], bool, int, int]:
            conn = self.db.conn()
            conn.execute("BEGIN")  # one snapshot for what is due and its descriptions
            try:
                ids = _due_documents(conn, request, now)
                more = len(ids) > request.limit
                documents: list[tuple[DocumentInfo, int, int]] = []
                for doc_id in ids[: request.limit]:
                    row = conn.execute(
                        f"SELECT {_INFO_COLUMNS}, d.line_count FROM documents AS d WHERE d.id = ?", (doc_id,)
                    ).fetchone()
                    if row is not None:
                        documents.append((_info(conn, row), int(row[-1]), doc_id))
                quarantined = keys = 0
                if request.dry_run:
                    quarantined = int(
                        conn.execute(
                            "SELECT count(*) FROM quarantine WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)
                        ).fetchone()[0]
                    )
                    if request.keys_before is not None:
                        keys = int(
                            conn.execute(
                                "SELECT count(*) FROM idempotency_keys WHERE recorded_at < ?",
                                (_iso(request.keys_before),),
                            ).fetchone()[0]
                        )
            finally:
                conn.execute("COMMIT")
            return documents, more, quarantined, keys

        documents, more, quarantined, keys = self.db.retry(due, "sweep_expired")
        if request.dry_run:
            return SweepResult(
                documents=[info for info, _lines, _id in documents],
                quarantine_removed=quarantined,
                keys_removed=keys,
                more=more,
            )
        removed: list[DocumentInfo] = []
        batch: list[tuple[DocumentInfo, int, int]] = []
        for index, item in enumerate(documents):
            batch.append(item)
            if (
                index == len(documents) - 1
                or len(batch) >= SWEEP_BATCH_DOCUMENTS
                or sum(lines for _info, lines, _id in batch) >= SWEEP_BATCH_LINES
            ):
                ids = [doc_id for _info, _lines, doc_id in batch]
                sweep = functools.partial(_sweep_batch, ids=ids, request=request)
                started = time.monotonic()
                gone, copies = self.db.commit(sweep, "sweep_expired")
                time.sleep((time.monotonic() - started) * SWEEP_PAUSE)
                removed.extend(info for info, _lines, doc_id in batch if doc_id in gone)
                quarantined += copies
                batch = []
        quarantined += self.db.commit(functools.partial(_sweep_quarantine, request=request), "sweep_expired")
        if request.keys_before is not None:
            before = _iso(request.keys_before)
            while True:
                pruned = self.db.commit(functools.partial(_prune_keys, before=before), "sweep_expired")
                keys += pruned
                if pruned < _KEYS_BATCH:
                    break
        if not more:
            self._finish_sweep(bool(removed or quarantined))
        return SweepResult(documents=removed, quarantine_removed=quarantined, keys_removed=keys, more=more)

    def _finish_sweep(self, removed: bool) -> None:
        """Rewrite every shard a sweep (or a write to an expired document) deleted lines from, one
        short transaction each, then scrub the write-ahead log (P24)."""
        shards = self.db.retry(
            lambda: [int(r[0]) for r in self.db.conn().execute("SELECT shard FROM swept_shards ORDER BY shard")],
            "sweep_expired",
        )

        def rewrite(conn: sqlite3.Connection, shard: int) -> None:
            schema.optimize_fts(conn, shard)
            conn.execute("DELETE FROM swept_shards WHERE shard = ?", (shard,))

        for shard in shards:
            self.db.commit(functools.partial(rewrite, shard=shard), "sweep_expired")
        if (shards or removed) and not self.db.memory:

            def record(conn: sqlite3.Connection) -> None:
                conn.execute(
                    "INSERT INTO pending_erasures (workspace_id, target, created_at) VALUES ('', 'sweep', ?)",
                    (schema.now_iso(),),
                )

            self.db.commit(record, "sweep_expired")
            self._scrubber.finish(wait=self.scrub_wait)

    # -- quarantine (P30) ------------------------------------------------------

    @hookimpl
    @translated("quarantine_keep")
    def memvault_quarantine_keep(self, record: _QuarantineRecord) -> bool:
        expiry = record.expires_at
        values = (*_columns(record), _iso(expiry) if expiry is not None else None)

        def keep(conn: sqlite3.Connection) -> bool:
            conn.execute(
                f"INSERT INTO quarantine ({_QCOLS}, expires_at) VALUES ({', '.join('?' * len(values))})", values
            )
            return True

        return self.db.commit(keep, "quarantine_keep")

    @hookimpl
    @translated("quarantine_list")
    def memvault_quarantine_list(self, workspace_id: str) -> list[_QuarantineRecord]:
        def listing() -> list[_QuarantineRecord]:
            rows = (
                self.db.conn()
                .execute(
                    f"SELECT {_QCOLS}, expires_at FROM quarantine WHERE workspace_id = ? AND {_QUARANTINE_LIVE}"
                    " ORDER BY id",
                    (workspace_id, _iso(clock.now())),
                )
                .fetchall()
            )
            return [self._record(r) for r in rows]

        return self.db.retry(listing, "quarantine_list")

    @hookimpl
    @translated("quarantine_get")
    def memvault_quarantine_get(self, workspace_id: str, sha256: str) -> _QuarantineRecord | None:
        def get() -> _QuarantineRecord | None:
            row = (
                self.db.conn()
                .execute(
                    f"SELECT {_QCOLS}, expires_at FROM quarantine WHERE workspace_id = ? AND sha256 = ?"
                    f" AND {_QUARANTINE_LIVE}"
                    " ORDER BY id DESC LIMIT 1",
                    (workspace_id, sha256, _iso(clock.now())),
                )
                .fetchone()
            )
            return self._record(row) if row else None

        return self.db.retry(get, "quarantine_get")

    @hookimpl
    @translated("quarantine_delete")
    def memvault_quarantine_delete(self, workspace_id: str, sha256: str) -> int:
        """Every copy of the body (a body rejected twice is kept twice); secure_delete overwrites the rows."""

        def delete(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM quarantine WHERE workspace_id = ? AND sha256 = ?", (workspace_id, sha256)
            ).rowcount

        return self.db.commit(delete, "quarantine_delete")

    def _record(self, row: Sequence[Any]) -> _QuarantineRecord:
        """A quarantine row (its :data:`_QFIELDS`, then its expiry) as a record, through the core's codec
        (the one JSON shape of a record)."""
        try:
            record = wire.structure(
                dict(zip(_QFIELDS, row[:-1], strict=True)), _QuarantineRecord, what="quarantine row"
            )
            return attrs.evolve(record, expires_at=_parse(row[-1])) if row[-1] else record
        except InvalidRequest as exc:
            raise UpstreamError(
                f"sqlite database {self.path} holds a quarantine row that is not a valid record ({exc}): "
                "it was edited outside memvault; delete or fix that row"
            ) from exc

    def __repr__(self) -> str:
        return f"<SqliteProvider path={self.path!r}>"


#: The quarantine table's columns: the record's fields by name (``memvault.contract.wire``'s shape of a record).
_QFIELDS: Final = (
    "workspace_id",
    "agent_id",
    "crew_id",
    "label",
    "category",
    "pattern",
    "sha256",
    "content",
    "created_at",
    "data_subject_id",
)
_QCOLS: Final = ", ".join(_QFIELDS)


def _columns(record: _QuarantineRecord) -> tuple[Any, ...]:
    """The column values of ``record``: its unstructured form (timestamps as ISO 8601 text)."""
    shape = wire.unstructure(record)
    return tuple(shape[name] for name in _QFIELDS)


def _subjects(conn: sqlite3.Connection, row: Sequence[Any]) -> tuple[str, ...]:
    """The data subjects a document carries (P13): its rows in ``document_subjects`` (schema v5)."""
    found = conn.execute(
        "SELECT data_subject_id FROM document_subjects WHERE document_id = ? ORDER BY data_subject_id", (row[0],)
    ).fetchall()
    return tuple(str(subject) for (subject,) in found)


def _count(conn: sqlite3.Connection, pid: int, tiers: tuple[str, ...], match: str, now: str) -> int:
    """How many lines of partition ``pid`` in ``tiers`` the FTS5 query ``match`` finds (of documents
    not expired at ``now``)."""
    fts = schema.fts_table(pid)
    low = pid << schema.LINE_BITS
    bounds = (match, low, low + (1 << schema.LINE_BITS) - 1)
    marks = ", ".join("?" * len(tiers))
    other = conn.execute(
        f"SELECT EXISTS (SELECT 1 FROM documents WHERE partition_id = ? AND tier NOT IN ({marks}))"
        " OR EXISTS (SELECT 1 FROM documents INDEXED BY documents_expiring WHERE partition_id = ?"
        " AND purge_at IS NOT NULL AND purge_at <= ?)",
        (pid, *tiers, pid, now),
    ).fetchone()[0]
    if not other:  # every document of the partition is searched and live: the index alone answers
        sql = f"SELECT count(*) FROM {fts} WHERE {fts} MATCH ? AND rowid BETWEEN ? AND ?"
        return int(conn.execute(sql, bounds).fetchone()[0])
    sql = (
        f"SELECT count(*) FROM {fts} JOIN lines AS l ON l.id = {fts}.rowid JOIN documents AS d"
        f" ON d.id = l.document_id WHERE {fts} MATCH ? AND {fts}.rowid BETWEEN ? AND ? AND d.tier IN ({marks})"
        f" AND {_LIVE}"
    )
    return int(conn.execute(sql, (*bounds, *tiers, now)).fetchone()[0])


def _candidates(
    conn: sqlite3.Connection,
    pid: int,
    tiers: tuple[str, ...],
    match: str,
    limit: int | None,
    now: str,
    *,
    probe: int = -1,
) -> list[Candidate]:
    """Narrow rows (no text, no digest) of partition ``pid``'s lines in ``tiers`` that ``match`` finds,
    of documents not expired at ``now`` (P41).

    :param limit: ``None`` for every line; otherwise at most that many, the shortest first.
    :param probe: with ``limit=None``, stop after this many lines (any; -1: no bound).
    """
    marks = ", ".join("?" * len(tiers))
    low = pid << schema.LINE_BITS
    fts = schema.fts_table(pid)
    return conn.execute(
        f"SELECT l.id, l.document_id, d.label, l.line_no, l.terms, l.length FROM {fts}"
        f" JOIN lines AS l ON l.id = {fts}.rowid JOIN documents AS d ON d.id = l.document_id"
        f" WHERE {fts} MATCH ? AND {fts}.rowid BETWEEN ? AND ? AND d.tier IN ({marks}) AND {_LIVE}"
        + (" LIMIT ?" if limit is None else " ORDER BY l.length, l.id LIMIT ?"),
        (match, low, low + (1 << schema.LINE_BITS) - 1, *tiers, now, probe if limit is None else limit),
    ).fetchall()


def _fused(
    conn: sqlite3.Connection,
    query: text.Query,
    vector: QueryVector,
    searched: Sequence[tuple[int, tuple[str, ...]]],
    lexical: list[RecallSnippet],
    texts: Callable[[Sequence[int]], dict[int, tuple[str, str]]],
    limit: int,
    now: str,
) -> list[RecallSnippet]:
    """``lexical`` fused with the searched lines' closeness in meaning to ``vector`` (P36).

    The vectors are read partition by partition, scoped like the lexical candidates inside
    the statement (the partition's rowid range, its tiers) and of the query's model only (P38).
    """
    refs: list[text.LineRef] = []
    ids: dict[text.LineRef, int] = {}
    blobs: list[bytes] = []
    size = 2 * vector.dimensions
    for pid, tier_values in searched:
        low = pid << schema.LINE_BITS
        marks = ", ".join("?" * len(tier_values))
        for line_id, label, line_no, blob in conn.execute(
            # NOT INDEXED: the partition's rowid range of the table itself (the model index would add a
            # look-up per vector).
            "SELECT v.line_id, d.label, l.line_no, v.vector FROM line_vectors AS v NOT INDEXED"
            " JOIN lines AS l ON l.id = v.line_id JOIN documents AS d ON d.id = l.document_id"
            f" WHERE v.line_id BETWEEN ? AND ? AND v.model = ? AND length(v.vector) = ? AND d.tier IN ({marks})"
            f" AND {_LIVE}",
            (low, low + (1 << schema.LINE_BITS) - 1, vector.model_id, size, *tier_values, now),
        ):
            ref = (str(label), int(line_no))
            refs.append(ref)
            ids[ref] = int(line_id)
            blobs.append(blob)
    similar = text.similarities(vector, refs, vectors_from_bytes(blobs, vector.dimensions), lexical)

    def line_texts(wanted: Sequence[text.LineRef]) -> dict[text.LineRef, tuple[str, str]]:
        found = texts([ids[ref] for ref in wanted])
        return {ref: found[ids[ref]] for ref in wanted if ids[ref] in found}

    return text.fuse(query, lexical, similar, line_texts, limit)


#: A document not expired at the moment given as the statement's parameter (an ISO 8601 instant, P41).
_LIVE: Final = "(d.purge_at IS NULL OR d.purge_at > ?)"
#: A quarantine copy not expired at the moment given as the parameter.
_QUARANTINE_LIVE: Final = "(expires_at IS NULL OR expires_at > ?)"
#: The columns :func:`_info` reads, of ``documents AS d``.
_INFO_COLUMNS: Final = (
    "d.id, d.workspace_id, d.agent_id, d.crew_id, d.tier, d.label, d.size, d.sha256, d.updated_at, d.purge_at"
)
#: Idempotency keys older than the window go this many per transaction.
_KEYS_BATCH: Final = 1000


def _iso(moment: _dt.datetime) -> str:
    """A time as stored: ISO 8601 in UTC to the microsecond, so text order is time order."""
    return moment.astimezone(_dt.timezone.utc).isoformat(timespec="microseconds")


def _parse(value: str | None) -> _dt.datetime | None:
    return _dt.datetime.fromisoformat(value) if value else None


def _info(conn: sqlite3.Connection, row: Sequence[Any]) -> DocumentInfo:
    """A document's description from a row of :data:`_INFO_COLUMNS`."""
    return DocumentInfo(
        workspace_id=row[1],
        agent_id=row[2],
        crew_id=row[3],
        tier=row[4],
        label=row[5],
        bytes=int(row[6]),
        subjects=_subjects(conn, row),
        digest=row[7],
        updated_at=_parse(row[8]),
        expires_at=_parse(row[9]),
    )


def _explicit_expiry(request: RetainRequest, stored: _dt.datetime | None, live: bool) -> _dt.datetime | None:
    """The explicit expiry the document has after ``request`` (P41): a replace sets it; an append
    keeps the live document's, or sets its own on a new (or expired) document, and may not change it.

    :raises InvalidRequest: an append naming another expiry than the live document's.
    """
    if request.mode != "append" or not live:
        return request.expires_at
    if request.expires_at is None or request.expires_at == stored:
        return stored
    kept = stored.isoformat() if stored is not None else "no expiry"
    raise InvalidRequest(
        f"document {request.label} has {kept}, and this append gives expires_at "
        f"{request.expires_at.isoformat()}: an expiry applies to the whole document, so append with the "
        "same expires_at (or none), replace the document, or write to a key of its own",
        field="expires_at",
    )


def _remove_expired(conn: sqlite3.Connection, doc_id: int) -> int:
    """Delete an expired document as a sweep does, with the quarantine copies of rejected writes to it
    (a copy of a rejected append is the final body: it holds the document's text, P24); its shard's
    index is rewritten by the next sweep.

    :return: how many quarantine copies went.
    """
    row = conn.execute(
        "SELECT partition_id, workspace_id, agent_id, crew_id, label FROM documents WHERE id = ?", (doc_id,)
    ).fetchone()
    schema.delete_document(conn, doc_id)
    conn.execute("INSERT OR IGNORE INTO swept_shards (shard) VALUES (?)", (int(row[0]) % schema.FTS_SHARDS,))
    return int(
        conn.execute(
            "DELETE FROM quarantine WHERE workspace_id = ? AND agent_id = ? AND crew_id = ? AND label = ?", row[1:]
        ).rowcount
    )


def _due_documents(conn: sqlite3.Connection, request: SweepRequest, now: str) -> list[int]:
    """Up to ``limit + 1`` ids of documents due at ``now``, the earliest expired first: past their
    ``purge_at``, or last written at or before their (workspace, tier) cutoff."""
    wanted = request.limit + 1
    due: dict[int, str] = {}
    for doc_id, when in conn.execute(
        "SELECT id, purge_at FROM documents INDEXED BY documents_by_purge"
        " WHERE purge_at IS NOT NULL AND purge_at <= ? ORDER BY purge_at, id LIMIT ?",
        (now, wanted),
    ):
        due[int(doc_id)] = str(when)
    for cutoff in request.retention.cutoffs(request.now):
        before = _iso(cutoff.before)
        retention = request.now - cutoff.before
        if cutoff.workspace_id:
            scope, params = "workspace_id = ?", [cutoff.workspace_id]
        else:
            excluded = sorted(cutoff.excluded)
            scope = f"workspace_id NOT IN ({', '.join('?' * len(excluded))})" if excluded else "1"
            params = excluded
        for doc_id, written in conn.execute(
            "SELECT id, updated_at FROM documents INDEXED BY documents_by_write"
            f" WHERE tier = ? AND updated_at <= ? AND {scope} ORDER BY updated_at, id LIMIT ?",
            (cutoff.tier.value, before, *params, wanted),
        ):
            when = _iso(_dt.datetime.fromisoformat(written) + retention)
            if int(doc_id) not in due or when < due[int(doc_id)]:
                due[int(doc_id)] = when
    return [doc_id for doc_id, _when in sorted(due.items(), key=lambda item: (item[1], item[0]))][:wanted]


def _sweep_batch(conn: sqlite3.Connection, ids: list[int], request: SweepRequest) -> tuple[set[int], int]:
    """Delete the documents of ``ids`` that are still due (a write since may have renewed one), with
    the quarantine copies of rejected appends to them (a copy holds the document's text, P24).

    :return: the documents deleted, and how many quarantine copies.
    """
    now = _iso(request.now)
    gone: set[int] = set()
    copies = 0
    for doc_id in ids:
        row = conn.execute(
            "SELECT workspace_id, tier, updated_at, purge_at FROM documents WHERE id = ?", (doc_id,)
        ).fetchone()
        if row is None:  # a write to it after it expired replaced it: that one is new
            continue
        workspace_id, tier, written, purge = row
        if not (
            (purge is not None and purge <= now)
            or request.retention.past_retention(workspace_id, tier, _dt.datetime.fromisoformat(written), request.now)
        ):
            continue  # written to since it was found: renewed
        copies += _remove_expired(conn, doc_id)
        gone.add(doc_id)
    return gone, copies


def _sweep_quarantine(conn: sqlite3.Connection, request: SweepRequest) -> int:
    """Delete the quarantine copies expired at the sweep's time (the write's expiry, or its retention)."""
    return int(
        conn.execute(
            "DELETE FROM quarantine INDEXED BY quarantine_by_expiry WHERE expires_at IS NOT NULL AND expires_at <= ?",
            (_iso(request.now),),
        ).rowcount
    )


def _prune_keys(conn: sqlite3.Connection, before: str) -> int:
    return conn.execute(
        "DELETE FROM idempotency_keys WHERE (workspace_id, key) IN (SELECT workspace_id, key FROM idempotency_keys"
        " INDEXED BY idempotency_keys_by_age WHERE recorded_at < ? LIMIT ?)",
        (before, _KEYS_BATCH),
    ).rowcount


def _any_pending(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT EXISTS (SELECT 1 FROM pending_erasures)").fetchone()[0])


def _erasure_target(request: ForgetRequest) -> str:
    """What a forget erases, as recorded while its scrub is pending (matched again by a retry)."""
    if request.data_subject_id:
        return f"subject:{request.data_subject_id}"
    part = request.ref.partition
    return f"document:{part.kind}:{part.owner_id}:{request.id}"
