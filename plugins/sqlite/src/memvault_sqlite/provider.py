"""The ``sqlite`` provider: one database file, WAL, a line-level FTS5 index."""

from __future__ import annotations

import datetime as _dt
import logging
import os
import random
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final, TypeVar

from memvault import search as text
from memvault.contract.errors import InvalidRequest, MemvaultError, UpstreamError
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
    RetainRequest,
    RetainResult,
    check_cap,
)
from memvault.contract.models import QuarantineRecord as _QuarantineRecord
from memvault.hooks.markers import hookimpl
from memvault.search import Candidate, index_terms, rank_candidates
from memvault_sqlite import schema
from memvault_sqlite.search import CANDIDATE_BUDGET, fts_query, narrowed_queries

__all__ = ["SqliteProvider"]

log = logging.getLogger("memvault_sqlite")

_T = TypeVar("_T")
_SYNCHRONOUS: Final = ("off", "normal", "full", "extra")
_OUR_TABLES: Final = frozenset(
    {"partitions", "documents", "lines", "quarantine", "probe", "document_subjects", "pending_erasures"}
)
#: Seconds between two attempts of the background scrub of pending erasures.
_SCRUB_INTERVAL: Final = 0.25
#: How long an opportunistic scrub attempt (background, after a write, at open) waits for
#: readers: short, because a waiting TRUNCATE checkpoint holds back new writers.
_BACKGROUND_BUSY_MS: Final = 10
MEMORY: Final = ":memory:"


def _is_busy(exc: sqlite3.Error) -> bool:
    msg = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


class SqliteProvider:
    """memvault documents in one SQLite database.

    :param path: the database file, created with its schema on first open
        (``:memory:`` for a private in-memory database, for tests).
    :param timeout: seconds a call waits for another thread's or process's
        write lock before giving up with :class:`~memvault.errors.UpstreamError`.
    :param synchronous: ``full`` (default: an acknowledged retain survives power
        loss) or ``normal`` (survives a process crash; faster commits).
    :param scrub_wait: seconds a forget waits for readers to leave the write-ahead
        log so the erased text can be scrubbed from it; after that the forget
        answers ``pending=True`` and the scrub finishes later (contract P24).
    """

    capabilities: Final = frozenset(
        {
            Capability.MULTI_PROCESS,
            Capability.DURABLE,
            Capability.CASCADE_FORGET,
            Capability.QUARANTINE,
            Capability.LIST_DOCUMENTS,
        }
    )

    def __init__(
        self, path: str = "memvault.db", timeout: float = 10.0, synchronous: str = "full", scrub_wait: float = 2.0
    ) -> None:
        if synchronous.lower() not in _SYNCHRONOUS:
            raise InvalidRequest(
                f"synchronous {synchronous!r} is not a SQLite synchronous level: use one of {', '.join(_SYNCHRONOUS)}",
                field="synchronous",
            )
        if timeout <= 0:
            raise InvalidRequest("timeout must be a positive number of seconds", field="timeout")
        if scrub_wait < 0:
            raise InvalidRequest("scrub_wait must be zero or a positive number of seconds", field="scrub_wait")
        self.timeout = float(timeout)
        self.scrub_wait = float(scrub_wait)
        self.synchronous = synchronous.lower()
        self._memory = path == MEMORY
        if self._memory:
            # One private database shared by this instance's connections.
            self.path = MEMORY
            self._uri = f"file:memvault-{uuid.uuid4().hex}?mode=memory&cache=shared"
        else:
            resolved = Path(path).expanduser().absolute()
            _check_location(resolved)
            self.path = str(resolved)
            self._uri = resolved.as_uri()
        self._local = threading.local()
        # (owning thread, connection): a dead thread's connection is closed when
        # the next one opens, so short-lived threads do not leak file handles.
        self._connections: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._conn_lock = threading.Lock()
        # In-memory databases share one cache, where SQLite's table locks do not
        # honour busy_timeout: serialise instead.
        self._memory_lock = threading.RLock() if self._memory else None
        self._closed = False
        self._stop = threading.Event()
        self._scrubber: threading.Thread | None = None
        self._identity: tuple[int, int] | None = None
        try:
            self._open_schema()
            if not self._memory:
                # stat, never open: health compares it to notice a file replaced under the vault.
                st = os.stat(self.path)
                self._identity = (st.st_dev, st.st_ino)
                # An erasure a crashed or busy process left unscrubbed is finished now, or soon.
                self._finish_pending(wait=0.0, busy_ms=_BACKGROUND_BUSY_MS)
        except OSError as exc:
            self.close()
            raise UpstreamError(f"cannot inspect the sqlite database {self.path}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    # -- connections ---------------------------------------------------------

    def _connect(self, busy_ms: int | None = None) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self._uri, uri=True, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise UpstreamError(
                f"cannot open the sqlite database {self.path}: {exc}; check that its directory is writable "
                "(SQLite creates the file and its -wal and -shm files there) and the file is not locked exclusively"
            ) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {busy_ms if busy_ms is not None else int(self.timeout * 1000)}")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            conn.close()
            raise _database_error(self.path, exc) from exc
        return conn

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise UpstreamError(f"the sqlite provider for {self.path} is closed: open a new vault")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._conn_lock:
                dead = [c for t, c in self._connections if not t.is_alive()]
                self._connections = [(t, c) for t, c in self._connections if t.is_alive()]
                self._connections.append((threading.current_thread(), conn))
            for old in dead:
                with suppress(sqlite3.Error):
                    old.close()
        return conn

    def _open_schema(self) -> None:
        conn = self._conn()

        def setup() -> int:
            if not self._memory:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise UpstreamError(f"{self.path}: SQLite refused WAL mode (got {mode!r})")
            with self._write(conn):
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
                    return schema.migrate(conn)
                except ValueError as exc:
                    raise UpstreamError(_newer_message(self.path, int(exc.args[0]))) from None

        self._retry(setup, "open")

    def close(self) -> None:
        """Close every connection this provider opened. Idempotent."""
        self._closed = True
        self._stop.set()
        scrubber = self._scrubber
        if scrubber is not None and scrubber is not threading.current_thread():
            scrubber.join(timeout=2.0)
        with self._conn_lock:
            conns, self._connections = self._connections, []
        for _thread, conn in conns:
            with suppress(sqlite3.Error):
                conn.close()

    # -- transactions and retries --------------------------------------------

    @contextmanager
    def _write(self, conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            # Also after a failed COMMIT: never leave the thread's connection mid-transaction.
            if conn.in_transaction:
                conn.rollback()
            raise

    def _retry(self, action: Callable[[], _T], verb: str) -> _T:
        """Run ``action``; retry "database is locked" up to ``timeout`` seconds, then UpstreamError."""
        deadline = time.monotonic() + self.timeout
        delay = 0.005
        while True:
            try:
                if self._memory_lock is not None:
                    with self._memory_lock:
                        return action()
                return action()
            except MemvaultError:
                raise
            except sqlite3.Error as exc:
                if _is_busy(exc) and time.monotonic() < deadline:
                    time.sleep(delay * (0.5 + random.random()))
                    delay = min(delay * 2, 0.2)
                    continue
                if _is_busy(exc):
                    raise UpstreamError(
                        f"sqlite database {self.path} stayed locked by another writer for more than "
                        f"{self.timeout:g} s during {verb}: retry later, or raise the provider's timeout setting"
                    ) from exc
                if _is_not_a_database(exc) or _is_corrupt(exc):
                    raise _database_error(self.path, exc) from exc
                raise UpstreamError(f"sqlite database {self.path} failed during {verb}: {exc}") from exc
            except OSError as exc:
                raise UpstreamError(f"sqlite database {self.path} failed during {verb}: {exc}") from exc

    # -- verbs -----------------------------------------------------------------

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        label = ref.label

        def write() -> tuple[RetainResult, bool]:
            conn = self._conn()
            with self._write(conn):
                part = ref.partition
                # One statement finds the partition, the document and whether erasures await their scrub
                # (nothing can add one while this transaction holds the write lock).
                found = conn.execute(
                    "SELECT p.id, d.id, d.body, d.size, EXISTS (SELECT 1 FROM pending_erasures) FROM partitions AS p"
                    " LEFT JOIN documents AS d ON d.partition_id = p.id AND d.tier = ? AND d.key = ?"
                    " WHERE p.workspace_id = ? AND p.kind = ? AND p.owner_id = ?",
                    (ref.tier.value, ref.key, part.workspace_id, part.kind, part.owner_id),
                ).fetchone()
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
                stamp = schema.now_iso()
                if doc is None:
                    cur = conn.execute(
                        "INSERT INTO documents (partition_id, workspace_id, agent_id, crew_id, tier, key, label,"
                        " body, size, data_subject_id, created_at, updated_at, sha256)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                        "UPDATE documents SET body = ?, size = ?, updated_at = ?, sha256 = ?,"
                        " line_count = line_count + ?, term_count = term_count + ? WHERE id = ?",
                        (body, size, stamp, schema.body_sha256(body), lines_delta, terms_delta, doc_id),
                    )
                if request.data_subject_id:
                    schema.tag_document(conn, doc_id, part.workspace_id, request.data_subject_id)
            return RetainResult(id=label, bytes=size, warning=warning), pending

        result, pending = self._retry(write, "retain")
        if pending:
            # The next write is an opportunity to finish an erasure (P24).
            self._finish_pending(wait=0.0, busy_ms=_BACKGROUND_BUSY_MS)
        return result

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        query = text.Query.parse(request.query)
        terms = index_terms(query)
        if not terms:
            return RecallResult(hits=[])
        match = fts_query(terms)

        def search() -> RecallResult:
            conn = self._conn()
            rows: list[Candidate] = []
            line_count = term_count = 0
            searched: list[tuple[int, tuple[str, ...]]] = []
            # One read transaction: the statistics, the candidates, the texts and the digests see one snapshot.
            conn.execute("BEGIN")
            try:
                for partition, tiers in request.scopes():
                    tier_values = tuple(t.value for t in tiers)
                    marks = ", ".join("?" * len(tier_values))
                    found = conn.execute(
                        "SELECT p.id, coalesce(sum(d.line_count), 0), coalesce(sum(d.term_count), 0)"
                        " FROM partitions AS p LEFT JOIN documents AS d"
                        f" ON d.partition_id = p.id AND d.tier IN ({marks})"
                        " WHERE p.workspace_id = ? AND p.kind = ? AND p.owner_id = ? GROUP BY p.id",
                        (*tier_values, partition.workspace_id, partition.kind, partition.owner_id),
                    ).fetchone()
                    if found is None:
                        continue
                    line_count += int(found[1])
                    term_count += int(found[2])
                    searched.append((int(found[0]), tier_values))
                df: list[int] | None = None
                budget = CANDIDATE_BUDGET
                for pid, tier_values in searched:
                    rows.extend(_candidates(conn, pid, tier_values, match, None, probe=budget + 1 - len(rows)))
                if len(rows) > budget:
                    # Many lines share a term (common words, a long history): count each term's lines,
                    # then score only the lines a narrower query keeps (see narrowed_queries).
                    df = [sum(_count(conn, pid, tiers, fts_query([t])) for pid, tiers in searched) for t in terms]
                    chosen, fits = match, False
                    for narrower in narrowed_queries(terms, df):
                        chosen = narrower
                        if sum(_count(conn, pid, tiers, narrower) for pid, tiers in searched) <= budget:
                            fits = True
                            break
                    rows = []
                    for pid, tier_values in searched:
                        # Still too many (one common word, or lines holding every term abound): the
                        # shortest lines, which BM25's length norm ranks first among equals.
                        rows.extend(_candidates(conn, pid, tier_values, chosen, None if fits else budget))
                    if not fits:
                        rows = sorted(rows, key=lambda row: (row[5], row[0]))[:budget]

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
                    query, rows, line_count=line_count, term_count=term_count, limit=request.limit, texts=texts, df=df
                )
            finally:
                conn.execute("COMMIT")
            return RecallResult(hits=hits)

        return self._retry(search, "recall")

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        ref = request.ref

        def read() -> ReadResult:
            part = ref.partition
            row = (
                self._conn()
                .execute(
                    "SELECT d.body FROM documents AS d JOIN partitions AS p ON p.id = d.partition_id"
                    " WHERE p.workspace_id = ? AND p.kind = ? AND p.owner_id = ? AND d.tier = ? AND d.key = ?",
                    (part.workspace_id, part.kind, part.owner_id, ref.tier.value, ref.key),
                )
                .fetchone()
            )
            return ReadResult(id=ref.label, content=row[0] if row else "")

        return self._retry(read, "read")

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        target = _erasure_target(request)

        def erase() -> tuple[int, bool, bool]:
            conn = self._conn()
            with self._write(conn):
                if request.id:
                    ref = request.ref
                    part = ref.partition
                    rows = conn.execute(
                        "SELECT d.id, d.partition_id FROM documents AS d JOIN partitions AS p"
                        " ON p.id = d.partition_id"
                        " WHERE p.workspace_id = ? AND p.kind = ? AND p.owner_id = ? AND d.tier = ? AND d.key = ?",
                        (part.workspace_id, part.kind, part.owner_id, ref.tier.value, ref.key),
                    ).fetchall()
                else:
                    # Exact match (P13): '=' on TEXT compares bytes; no LIKE, no case folding.
                    rows = conn.execute(
                        "SELECT DISTINCT d.id, d.partition_id FROM document_subjects AS s"
                        " JOIN documents AS d ON d.id = s.document_id"
                        " WHERE s.workspace_id = ? AND s.data_subject_id = ?",
                        (request.workspace_id, request.data_subject_id),
                    ).fetchall()
                for doc_id, _pid in rows:
                    schema.delete_document(conn, doc_id)
                quarantined = 0
                if request.data_subject_id:
                    # Quarantine copies of the subject's rejected writes are derived data too (P24).
                    quarantined = conn.execute(
                        "DELETE FROM quarantine WHERE workspace_id = ? AND data_subject_id = ?",
                        (request.workspace_id, request.data_subject_id),
                    ).rowcount
                # Rewrite each FTS shard that held the text as one segment: the erased
                # terms leave the index instead of lingering under delete markers, and
                # secure_delete zeroes the pages the old segments freed.
                for table in sorted({schema.fts_table(pid) for _doc, pid in rows}):
                    conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
                if (rows or quarantined) and not self._memory:
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
                return len(rows), bool(mine), _any_pending(conn)

        removed, mine, anything = self._retry(erase, "forget")
        pending = False
        if anything:
            # Our own erasure (or a retry of it) waits for readers up to scrub_wait; a forget
            # of something else only takes the opportunity to finish older ones.
            if mine:
                done = self._finish_pending(wait=self.scrub_wait)
            else:
                done = self._finish_pending(wait=0.0, busy_ms=_BACKGROUND_BUSY_MS)
            pending = mine and not done
        return ForgetResult(removed=removed, pending=pending)

    def _finish_pending(self, *, wait: float, busy_ms: int = 50) -> bool:
        """Scrub the bytes of every recorded erasure: checkpoint and truncate the WAL, then drop the records.

        :return: ``True`` when nothing is pending any more; otherwise a background
            thread keeps trying until it succeeds or the provider is closed.
        """
        if self._memory or self._closed:
            return not self._closed
        try:
            done = self._scrub(wait, busy_ms)
        except (sqlite3.Error, MemvaultError) as exc:
            log.warning("sqlite database %s: scrub of pending erasures failed, will retry: %s", self.path, exc)
            done = False
        if not done:
            self._start_scrubber()
        return done

    def _scrub(self, wait: float, busy_ms: int = 50) -> bool:
        # The calling thread's own connection (its schema is loaded already), outside any
        # transaction. A TRUNCATE checkpoint holds back new writers while it waits for
        # readers, so every attempt waits only briefly (busy_ms) and retries sleep in between.
        conn = self._conn()
        conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        try:
            deadline = time.monotonic() + wait
            while True:
                newest = conn.execute("SELECT max(id) FROM pending_erasures").fetchone()[0]
                if newest is None:
                    return True
                try:
                    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                    if not busy:
                        # Every erasure recorded up to `newest` committed before this checkpoint
                        # began, so its deleted text has left the WAL (and secure_delete zeroed it
                        # in the database pages). Later records belong to a later checkpoint.
                        # Dropping the records needs no fsync of its own: if it is lost in a
                        # crash, the next open scrubs again (a no-op) and drops them then.
                        conn.execute("PRAGMA synchronous = NORMAL")
                        try:
                            conn.execute("DELETE FROM pending_erasures WHERE id <= ?", (newest,))
                        finally:
                            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
                        return True
                except sqlite3.Error as exc:
                    if not _is_busy(exc):
                        raise
                if time.monotonic() >= deadline or self._stop.is_set():
                    return False
                time.sleep(0.02)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")

    def _start_scrubber(self) -> None:
        with self._conn_lock:
            if self._closed or (self._scrubber is not None and self._scrubber.is_alive()):
                return
            self._scrubber = threading.Thread(
                target=self._scrub_until_done, name=f"memvault-sqlite-scrub-{self.path}", daemon=True
            )
            self._scrubber.start()

    def _scrub_until_done(self) -> None:
        while not self._stop.wait(_SCRUB_INTERVAL):
            try:
                if self._scrub(0.0, busy_ms=_BACKGROUND_BUSY_MS):
                    return
            except (sqlite3.Error, MemvaultError) as exc:
                log.warning("sqlite database %s: background scrub failed, will retry: %s", self.path, exc)

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        return health(self)

    @hookimpl
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
        sql = "SELECT id, workspace_id, agent_id, crew_id, tier, label, size, sha256, updated_at FROM documents" + (
            " WHERE " + " AND ".join(where) if where else ""
        )

        def listing() -> ListDocumentsResult:
            conn = self._conn()
            conn.execute("BEGIN")  # one snapshot for the rows and their subjects
            try:
                rows = conn.execute(sql, params).fetchall()
                documents = [
                    DocumentInfo(
                        workspace_id=row[1],
                        agent_id=row[2],
                        crew_id=row[3],
                        tier=row[4],
                        label=row[5],
                        bytes=int(row[6]),
                        subjects=_subjects(conn, row),
                        digest=row[7],
                        updated_at=_dt.datetime.fromisoformat(row[8]) if row[8] else None,
                    )
                    for row in rows
                ]
            finally:
                conn.execute("COMMIT")
            return ListDocumentsResult(documents=documents)

        return self._retry(listing, "list_documents")

    # -- quarantine (P30) ------------------------------------------------------

    @hookimpl
    def memvault_quarantine_keep(self, record: _QuarantineRecord) -> bool:
        def keep() -> bool:
            conn = self._conn()
            with self._write(conn):
                conn.execute(
                    "INSERT INTO quarantine (workspace_id, agent_id, crew_id, label, category, pattern, sha256,"
                    " content, created_at, data_subject_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.workspace_id,
                        record.agent_id,
                        record.crew_id,
                        record.label,
                        record.category,
                        record.pattern,
                        record.sha256,
                        record.content,
                        record.created_at.isoformat(),
                        record.data_subject_id,
                    ),
                )
            return True

        return self._retry(keep, "quarantine_keep")

    @hookimpl
    def memvault_quarantine_list(self, workspace_id: str) -> list[_QuarantineRecord]:
        def listing() -> list[_QuarantineRecord]:
            rows = (
                self._conn()
                .execute(f"SELECT {_QCOLS} FROM quarantine WHERE workspace_id = ? ORDER BY id", (workspace_id,))
                .fetchall()
            )
            return [_record(r) for r in rows]

        return self._retry(listing, "quarantine_list")

    @hookimpl
    def memvault_quarantine_get(self, workspace_id: str, sha256: str) -> _QuarantineRecord | None:
        def get() -> _QuarantineRecord | None:
            row = (
                self._conn()
                .execute(
                    f"SELECT {_QCOLS} FROM quarantine WHERE workspace_id = ? AND sha256 = ? ORDER BY id DESC LIMIT 1",
                    (workspace_id, sha256),
                )
                .fetchone()
            )
            return _record(row) if row else None

        return self._retry(get, "quarantine_get")

    def __repr__(self) -> str:
        return f"<SqliteProvider path={self.path!r}>"


_QCOLS: Final = (
    "workspace_id, agent_id, crew_id, label, category, pattern, sha256, content, created_at, data_subject_id"
)


def _subjects(conn: sqlite3.Connection, row: tuple[object, ...]) -> tuple[str, ...]:
    """The data subjects a document carries (P13): its rows in ``document_subjects`` (schema v5)."""
    found = conn.execute(
        "SELECT data_subject_id FROM document_subjects WHERE document_id = ? ORDER BY data_subject_id", (row[0],)
    ).fetchall()
    return tuple(str(subject) for (subject,) in found)


def _record(row: tuple[str, ...]) -> _QuarantineRecord:
    import datetime as _dt

    return _QuarantineRecord(
        workspace_id=row[0],
        agent_id=row[1],
        crew_id=row[2],
        label=row[3],
        category=row[4],
        pattern=row[5],
        sha256=row[6],
        content=row[7],
        created_at=_dt.datetime.fromisoformat(row[8]),
        data_subject_id=row[9],
    )


def _count(conn: sqlite3.Connection, pid: int, tiers: tuple[str, ...], match: str) -> int:
    """How many lines of partition ``pid`` in ``tiers`` the FTS5 query ``match`` finds."""
    fts = schema.fts_table(pid)
    low = pid << schema.LINE_BITS
    bounds = (match, low, low + (1 << schema.LINE_BITS) - 1)
    marks = ", ".join("?" * len(tiers))
    other = conn.execute(
        f"SELECT EXISTS (SELECT 1 FROM documents WHERE partition_id = ? AND tier NOT IN ({marks}))", (pid, *tiers)
    ).fetchone()[0]
    if not other:  # every document of the partition is searched: the index alone answers
        sql = f"SELECT count(*) FROM {fts} WHERE {fts} MATCH ? AND rowid BETWEEN ? AND ?"
        return int(conn.execute(sql, bounds).fetchone()[0])
    sql = (
        f"SELECT count(*) FROM {fts} JOIN lines AS l ON l.id = {fts}.rowid JOIN documents AS d"
        f" ON d.id = l.document_id WHERE {fts} MATCH ? AND {fts}.rowid BETWEEN ? AND ? AND d.tier IN ({marks})"
    )
    return int(conn.execute(sql, (*bounds, *tiers)).fetchone()[0])


def _candidates(
    conn: sqlite3.Connection, pid: int, tiers: tuple[str, ...], match: str, limit: int | None, *, probe: int = -1
) -> list[Candidate]:
    """Narrow rows (no text, no digest) of partition ``pid``'s lines in ``tiers`` that ``match`` finds.

    :param limit: ``None`` for every line; otherwise at most that many, the shortest first.
    :param probe: with ``limit=None``, stop after this many lines (any; -1: no bound).
    """
    marks = ", ".join("?" * len(tiers))
    low = pid << schema.LINE_BITS
    fts = schema.fts_table(pid)
    return conn.execute(
        f"SELECT l.id, l.document_id, d.label, l.line_no, l.terms, l.length FROM {fts}"
        f" JOIN lines AS l ON l.id = {fts}.rowid JOIN documents AS d ON d.id = l.document_id"
        f" WHERE {fts} MATCH ? AND {fts}.rowid BETWEEN ? AND ? AND d.tier IN ({marks})"
        + (" LIMIT ?" if limit is None else " ORDER BY l.length, l.id LIMIT ?"),
        (match, low, low + (1 << schema.LINE_BITS) - 1, *tiers, probe if limit is None else limit),
    ).fetchall()


def _any_pending(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT EXISTS (SELECT 1 FROM pending_erasures)").fetchone()[0])


def _erasure_target(request: ForgetRequest) -> str:
    """What a forget erases, as recorded while its scrub is pending (matched again by a retry)."""
    if request.data_subject_id:
        return f"subject:{request.data_subject_id}"
    part = request.ref.partition
    return f"document:{part.kind}:{part.owner_id}:{request.id}"


def _newer_message(path: str, version: int) -> str:
    return (
        f"sqlite database {path} has schema version {version}, newer than the {schema.SCHEMA_VERSION} this "
        "memvault-sqlite understands (a newer release wrote it): upgrade memvault-sqlite, or open another file"
    )


def _is_not_a_database(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc).lower()


def _is_corrupt(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.DatabaseError) and "malformed" in str(exc).lower()


def _database_error(path: str, exc: sqlite3.Error) -> MemvaultError:
    """SQLite's own verdict on the file, as a typed error that says what to do."""
    if _is_not_a_database(exc):
        return InvalidRequest(
            f"{path} is not a SQLite database (SQLite says: {exc}): point path at a memvault database or a new file",
            field="path",
        )
    if _is_corrupt(exc):
        return UpstreamError(
            f"the sqlite database {path} is corrupt (SQLite says: {exc}): restore it from a backup, or "
            "recover it with the sqlite3 shell's .recover command"
        )
    if _is_busy(exc):
        return UpstreamError(f"the sqlite database {path} is locked exclusively by another process: retry later")
    return UpstreamError(f"cannot use the sqlite database {path}: {exc}")


def _check_location(path: Path) -> None:
    """Refuse, before SQLite sees it, a path whose directory is missing or unwritable (``stat`` only)."""
    parent = path.parent
    if not parent.is_dir():
        raise InvalidRequest(
            f"the directory of the sqlite database {path} does not exist: create {parent} or set path to a "
            "file in an existing directory",
            field="path",
        )
    if path.is_dir():
        raise InvalidRequest(f"sqlite path {path} is a directory: set path to a file name", field="path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UpstreamError(
            f"the directory {parent} of the sqlite database is not writable (SQLite needs to create its "
            "-wal and -shm files there): fix its permissions or choose another directory"
        )
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise UpstreamError(f"sqlite database {path} is not readable and writable: fix its permissions")
    # Never open the file (or its -wal/-shm) here to sniff its header: on POSIX, closing any
    # descriptor of a file drops every fcntl lock this process holds on it, including the
    # locks of SQLite connections other vaults of this process have open on the same file.
    # SQLite itself says "file is not a database" on the first statement; _connect and
    # _retry translate that into InvalidRequest.


def health(provider: SqliteProvider) -> HealthStatus:
    """Open a fresh connection, run a query and a rolled-back write probe (P25-P27)."""
    if provider._memory:
        try:
            provider._retry(lambda: provider._conn().execute("SELECT count(*) FROM documents").fetchone(), "health")
        except MemvaultError as exc:
            return HealthStatus(ok=False, message=str(exc))
        return HealthStatus(ok=True)
    path = Path(provider.path)
    if not path.parent.is_dir():
        return HealthStatus(ok=False, message=f"the directory {path.parent} of the sqlite database is missing")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return HealthStatus(ok=False, message=f"the directory {path.parent} of the sqlite database is not writable")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return HealthStatus(ok=False, message=f"the sqlite database file {path} is missing (deleted after open?)")
    except OSError as exc:
        return HealthStatus(ok=False, message=f"the sqlite database {path} cannot be inspected: {exc}")
    if provider._identity is not None and (st.st_dev, st.st_ino) != provider._identity:
        return HealthStatus(
            ok=False,
            message=f"the sqlite database file {path} was replaced by another file since the vault opened it "
            "(it may not be a SQLite database): restore the file, or close and reopen the vault",
        )
    try:
        conn = provider._connect(busy_ms=100)
    except MemvaultError as exc:
        return HealthStatus(ok=False, message=f"the sqlite database cannot be opened: {exc}")
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > schema.SCHEMA_VERSION:
            return HealthStatus(ok=False, message=_newer_message(str(path), version))
        conn.execute("SELECT count(*) FROM partitions").fetchone()
        pending = int(conn.execute("SELECT count(*) FROM pending_erasures").fetchone()[0])
        # Other connections' commits change data_version: a write lock that stays busy while
        # they commit is a busy database, not a stuck one (P25: busy is healthy).
        version_before = conn.execute("PRAGMA data_version").fetchone()[0]
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if _is_busy(exc) and conn.execute("PRAGMA data_version").fetchone()[0] != version_before:
                return HealthStatus(ok=True, pending_erasures=pending)
            raise
        try:
            conn.execute("INSERT INTO probe DEFAULT VALUES")
        finally:
            conn.execute("ROLLBACK")
    except sqlite3.Error as exc:
        if _is_busy(exc):
            return HealthStatus(ok=False, message=f"the sqlite database {path} is locked by a long write")
        if "readonly" in str(exc).lower():
            return HealthStatus(ok=False, message=f"the sqlite database {path} is read-only: {exc}")
        if _is_not_a_database(exc):
            return HealthStatus(ok=False, message=f"{path} is not a SQLite database any more (SQLite says: {exc})")
        if _is_corrupt(exc):
            return HealthStatus(ok=False, message=f"the sqlite database {path} is corrupt (SQLite says: {exc})")
        return HealthStatus(ok=False, message=f"the sqlite database {path} failed a probe query: {exc}")
    finally:
        conn.close()
    return HealthStatus(ok=True, pending_erasures=pending)
