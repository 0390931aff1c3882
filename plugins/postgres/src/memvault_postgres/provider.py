"""The ``postgres`` provider: memvault documents in one PostgreSQL database.

Every verb is one short transaction on a pooled connection. Appends lock the
document's row (``SELECT ... FOR UPDATE``), check the cap on the final body and
write it in the same transaction, so any number of writers in any number of
processes and hosts interleave whole writes only. Recall selects candidate
lines through a GIN index local to the partition and ranks them here (see
:mod:`memvault_postgres.search`).
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
import math
import os
import random
import re
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

import attrs
import psycopg
import psycopg.errors
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from memvault import check_stored, telemetry
from memvault import search as text
from memvault.contract import clock, wire
from memvault.contract.embedding import PendingLine, QueryVector, line_digest, vectors_from_bytes
from memvault.contract.errors import (
    IdempotencyConflict,
    InvalidRequest,
    MemvaultError,
    UpstreamError,
    UpstreamTimeout,
)
from memvault.contract.forking import after_fork_in_child
from memvault.contract.models import (
    Capability,
    DocumentInfo,
    ForgetRequest,
    ForgetResult,
    HealthStatus,
    ListDocumentsRequest,
    ListDocumentsResult,
    Partition,
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
from memvault.contract.scanning import nothing_written
from memvault.hooks.markers import hookimpl
from memvault.search import CANDIDATE_BUDGET, index_terms, narrowed_levels, narrowing, rank_candidates, stored_line
from memvault_postgres import schema
from memvault_postgres.retry import RetryLoop
from memvault_postgres.search import MAX_TERM, lexemes, ts_query

log = logging.getLogger(__name__)

__all__ = ["ERASE_RETRY_LOCK_WAIT", "PostgresProvider"]

_T = TypeVar("_T")
_P = ParamSpec("_P")
_Conn = psycopg.Connection[tuple[Any, ...]]
#: The provider's own health deadline: under the 1 s a remote store gets (P26).
HEALTH_DEADLINE: Final = 0.9
#: Seconds after a successful call during which a pooled connection is lent without a check.
_TRUST_RECENT: Final = 1.0
#: How many deleted row versions a VACUUM FULL copied, in its report. VACUUM's reports are read in English:
#: the provider sets ``lc_messages`` to ``C`` for its VACUUMs where the role may (see _untranslated).
_RECENTLY_DEAD: Final = re.compile(r"(\d+) dead row versions cannot be removed yet")
#: The transaction id below which VACUUM removes deleted rows, in its report (PostgreSQL 15 and later
#: say "removable cutoff", earlier releases "oldest xmin").
_CUTOFF: Final = re.compile(r"(?:removable cutoff|oldest xmin): (\d+)")
#: ``lc_messages`` values under which the server's messages are not translated.
_UNTRANSLATED: Final = frozenset({"c", "posix"})
#: Seconds the background retry of a pending erasure waits for a shard's lock (``erase_lock_timeout``
#: when that is shorter). Retains and recalls of the shard that arrive meanwhile queue behind the
#: waiting rewrite, so none waits for it much longer than this; the rewrite tries again next round.
ERASE_RETRY_LOCK_WAIT: Final = 0.5
#: Errors after which the whole transaction was rolled back and is safe to run again.
_RETRYABLE: Final = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
#: A recall's candidate rows of the searched partitions and tiers (the caller adds the ``tsquery``):
#: document id, label, line number, text, index words, length, the document's digest.
_CANDIDATES: Final = (
    "SELECT l.document_id, d.label, l.line_no, l.text, l.terms, l.length, d.sha256"
    " FROM lines AS l JOIN documents AS d ON d.partition_id = l.partition_id AND d.id = l.document_id"
    " WHERE l.partition_id = ANY(%(pids)s) AND d.partition_id = ANY(%(pids)s) AND l.tier = ANY(%(tiers)s)"
    # A document expired at the recall's moment is absent (P41), inside the statement.
    " AND (d.purge_at IS NULL OR d.purge_at > %(now)s)"
)
#: The lines and terms of the searched partitions' and tiers' documents expired at ``%(now)s`` and not swept
#: yet (a range of the partial index on (partition_id, purge_at)): a recall's statistics leave them out.
_EXPIRED_COUNTS: Final = (
    "SELECT coalesce(sum(line_count), 0) AS lines, coalesce(sum(term_count), 0) AS terms FROM documents"
    " WHERE partition_id = ANY(%(pids)s) AND purge_at IS NOT NULL AND purge_at <= %(now)s AND tier = ANY(%(tiers)s)"
)
#: A sweep deletes expired documents in transactions of at most this many documents ...
SWEEP_BATCH_DOCUMENTS: Final = 64
#: ... or of about this many lines, so a recall or a write never waits long behind one.
SWEEP_BATCH_LINES: Final = 512
#: Idempotency keys older than the window go this many per transaction.
_KEYS_BATCH: Final = 1000


def _narrowed(
    conn: _Conn, searched: dict[str, Any], terms: Sequence[str], limit: int, *, expired: bool = False
) -> tuple[int, int, list[int] | None, list[tuple[Any, ...]]]:
    """More than the budget of lines share a query term: the statistics, each term's document
    frequency and the candidate rows of the subset :func:`memvault.search.narrowed_subset` keeps
    (the subset the sqlite provider and :func:`memvault.search.search` score), in one snapshot.

    Two statements, neither sending a row per matching line: the first counts the matching
    lines by which of the query's terms they hold (a bit mask, so a handful of groups), which
    gives each term's frequency and the level to keep (:func:`memvault.search.narrowed_levels`);
    the second reads the kept lines' rows, the shortest first when they are still too many
    (ties in document and line order, as the other providers break them). If no more than the
    budget match any longer (lines forgotten since the caller's first look), every matching
    line and no frequencies (the caller's ranking counts them in the rows). With ``expired``
    (documents of the searched partitions expired and not swept yet), their lines are left out
    of the counts too.
    """
    per_term = [" | ".join(f"'{pid}.{t}'" for pid in searched["pids"]) for t in terms]
    params: dict[str, Any] = {**searched, **{f"t{i}": q for i, q in enumerate(per_term)}}
    params["query"] = " | ".join(per_term)
    # Which of the query's terms a line holds, as bits: beyond 62 terms no narrower query exists
    # (memvault.search.narrowing stops where the combinations of two terms pass 64), each term's
    # frequency is counted apart and every line is at level 1.
    bits = len(terms) <= 62
    mask = " + ".join(f"((l.tsv @@ %(t{i})s::tsquery)::int::bigint << {i})" for i in range(len(terms)))
    if not bits:
        mask = "0::bigint"
    where = "l.tsv @@ %(query)s::tsquery"
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        line_count, term_count = conn.execute(
            f"WITH gone AS ({_EXPIRED_COUNTS}) SELECT coalesce(sum(lines), 0) - (SELECT lines FROM gone),"
            " coalesce(sum(terms), 0) - (SELECT terms FROM gone) FROM tier_counts"
            " WHERE partition_id = ANY(%(pids)s) AND tier = ANY(%(tiers)s)",
            params,
        ).fetchone() or (0, 0)
        lines = "FROM lines AS l WHERE l.partition_id = ANY(%(pids)s) AND l.tier = ANY(%(tiers)s)"
        if expired:
            lines += (
                " AND NOT EXISTS (SELECT 1 FROM documents AS x WHERE x.partition_id = l.partition_id"
                " AND x.id = l.document_id AND x.purge_at <= %(now)s)"
            )
        groups: dict[int, int] = {
            int(held): int(n)
            for held, n in conn.execute(f"SELECT {mask} AS held, count(*) {lines} AND {where} GROUP BY held", params)
        }
        df: list[int] | None = None
        order = ""
        if sum(groups.values()) > CANDIDATE_BUDGET:
            if bits:
                df = [sum(n for held, n in groups.items() if held >> i & 1) for i in range(len(terms))]
                rare, levels = narrowing(df)
                rare_bits = sum(1 << i for i in rare)
                level = {held: held.bit_count() + len(terms) * bool(held & rare_bits) for held in groups}
            else:
                counts = ", ".join(f"count(*) FILTER (WHERE l.tsv @@ %(t{i})s::tsquery)" for i in range(len(terms)))
                df = [int(n) for n in conn.execute(f"SELECT {counts} {lines} AND {where}", params).fetchone() or ()]
                levels = narrowing(df)[1]
                level = dict.fromkeys(groups, 1)
            at_level: Counter[int] = Counter()
            for held, n in groups.items():
                at_level[level[held]] += n
            wider, chosen = narrowed_levels(at_level, levels)
            params["kept"] = [held for held in groups if level[held] >= chosen]
            params["budget"] = CANDIDATE_BUDGET
            kept = sum(groups[held] for held in params["kept"])
            # Ties in length in document and line order, the order the other providers break them in.
            by_length = "l.length, l.document_id, l.line_no, l.partition_id"
            if kept < limit:
                # Fewer lines than asked for: the shortest other lines of the level before fill the budget.
                params["wider"] = [held for held in groups if level[held] >= wider]
                where += f" AND {mask} = ANY(%(wider)s)"
                order = f" ORDER BY ({mask} <> ALL(%(kept)s)), {by_length} LIMIT %(budget)s"
            else:
                where += f" AND {mask} = ANY(%(kept)s)"
                if kept > CANDIDATE_BUDGET:
                    order = f" ORDER BY {by_length} LIMIT %(budget)s"
        if order:
            # The shortest lines picked on the narrow columns first, then read whole by their keys.
            where = (
                "(l.partition_id, l.document_id, l.line_no) IN (SELECT l.partition_id, l.document_id, l.line_no"
                f" {lines} AND {where}{order})"
            )
        rows = conn.execute(f"{_CANDIDATES} AND {where}", params).fetchall()
    return int(line_count), int(term_count), df, rows


def _translated(
    verb: str,
) -> Callable[[Callable[Concatenate[PostgresProvider, _P], _T]], Callable[Concatenate[PostgresProvider, _P], _T]]:
    """Run the method inside :meth:`PostgresProvider._errors`: no psycopg or pool error leaves it (P28).

    Every hook that can raise and :meth:`PostgresProvider.close` carry it, so the provider keeps its
    error contract whoever calls it (a ``Vault`` translates nothing for its providers).
    """

    def decorate(
        method: Callable[Concatenate[PostgresProvider, _P], _T],
    ) -> Callable[Concatenate[PostgresProvider, _P], _T]:
        @functools.wraps(method)
        def translated(self: PostgresProvider, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
            with telemetry.db_span("postgresql", verb), self._errors(verb):
                return method(self, *args, **kwargs)

        return translated

    return decorate


#: What forked children inherited: pools and connections kept so they are never closed.
_INHERITED: list[tuple[ConnectionPool[Any], list[Any]]] = []


class PostgresProvider:
    """memvault documents in a PostgreSQL database (one schema of it).

    :param dsn: a libpq connection string or URI (``postgresql://user@host/db``);
        empty: libpq's defaults and its ``PGHOST``, ``PGPORT``, ``PGDATABASE``,
        ``PGUSER``, ``PGPASSWORD`` / ``PGPASSFILE`` environment variables.
    :param schema: the PostgreSQL schema holding memvault's tables, created with
        them on first open (``[a-z_][a-z0-9_]*``).
    :param pool_size: the most connections this process opens.
    :param statement_timeout: seconds a statement may run before PostgreSQL
        cancels it (:class:`~memvault.errors.UpstreamTimeout`).
    :param pool_timeout: seconds a call waits for a free pooled connection.
    :param connect_timeout: seconds to wait for a new connection.
    :param erase_lock_timeout: seconds an erasure waits for the lock it needs
        to rewrite a table's files before it reports the erasure as pending.
    :param erase_retry_interval: seconds between a pending erasure and the
        first background retry that finishes it; the pause doubles after each
        retry that leaves it pending, up to a minute.
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
            # Across a network: health gets the remote deadline (P26). The client scans
            # (no scans_upstream): PostgreSQL stores whatever it is given.
            Capability.REMOTE,
        }
    )

    def __init__(
        self,
        dsn: str = "",
        schema: str = "memvault",
        pool_size: int = 10,
        statement_timeout: float = 30.0,
        pool_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        erase_lock_timeout: float = 5.0,
        erase_retry_interval: float = 2.0,
    ) -> None:
        if not _schema_ok(schema):
            raise InvalidRequest(
                f"schema {schema!r} is not a plain PostgreSQL schema name: use 1-63 characters of [a-z0-9_], "
                "starting with a letter or _",
                field="schema",
            )
        for name, value in (
            ("statement_timeout", statement_timeout),
            ("pool_timeout", pool_timeout),
            ("connect_timeout", connect_timeout),
            ("erase_lock_timeout", erase_lock_timeout),
            ("erase_retry_interval", erase_retry_interval),
        ):
            if not 0 < value < math.inf:  # nan fails it too
                raise InvalidRequest(f"{name} must be a positive, finite number of seconds", field=name)
        if pool_size < 1:
            raise InvalidRequest("pool_size must be at least 1", field="pool_size")
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise InvalidRequest(
                f"dsn is not a libpq connection string or URI ({exc}): use e.g. "
                "'postgresql://user@host:5432/dbname' or 'host=... dbname=...'",
                field="dsn",
            ) from None
        self.schema = schema
        self.pool_size = int(pool_size)
        self.statement_timeout = float(statement_timeout)
        self.pool_timeout = float(pool_timeout)
        self.erase_lock_timeout = float(erase_lock_timeout)
        self.erase_retry_interval = float(erase_retry_interval)
        params.setdefault("application_name", "memvault")
        params["connect_timeout"] = str(max(2, round(connect_timeout)))
        self._conninfo = make_conninfo("", **params)
        self.where = _describe(params)
        self._partitions: dict[tuple[str, str, str], int] = {}
        self._last_used: weakref.WeakKeyDictionary[_Conn, float] = weakref.WeakKeyDictionary()
        self._health_lock = threading.Lock()
        #: The probe running now (its end and its outcome): a concurrent health call waits for it (P25/P28).
        self._health_running: tuple[threading.Event, list[HealthStatus]] | None = None
        self._health_conn: _Conn | None = None
        self._fold_dice = random.Random()
        self._closed = False
        #: Every connection the pool opened that is still alive (their sockets, after a fork: see _forked).
        self._conns: weakref.WeakSet[_Conn] = weakref.WeakSet()
        #: The background retry of pending erasures (P24), and the connection of its round in progress.
        self._erase_retry = self._new_erase_retry()
        self._retry_conn: _Conn | None = None
        #: The retry said that VACUUM's report cannot be read, and has not read one since (it says it once).
        self._retry_said_unreadable = False
        self._open_schema()
        self.pool = self._new_pool()
        after_fork_in_child(self, PostgresProvider._forked)
        pending: list[str] | None = None
        with suppress(MemvaultError), self._errors("open"):
            # An erasure a crash or a busy lock left pending finishes now (P24), or in the background.
            pending = self._run(self._scrub)
        if pending != []:
            self._erase_retry.kick()

    # -- connections ---------------------------------------------------------

    def _new_pool(self) -> ConnectionPool[_Conn]:
        pool: ConnectionPool[_Conn] = ConnectionPool(
            self._conninfo,
            kwargs={"autocommit": True},
            min_size=1,
            max_size=self.pool_size,
            timeout=self.pool_timeout,
            configure=self._configure,
            check=self._check,
            name=f"memvault-postgres-{self.schema}",
            open=False,
        )
        pool.open(wait=False)
        return pool

    def _forked(self) -> None:
        """In a forked child: a new pool; the parent's connections are never used or closed here.

        Their sockets are the parent's too: a query sent on one could read the parent's answer
        (another agent's rows), and closing one sends PostgreSQL the end of the parent's session.
        Each is pointed at ``/dev/null`` (only in this process), so nothing this process does with
        them, even when they are collected, reaches the server; the pool that held them is kept.
        """
        inherited = [*self._conns, *([self._health_conn] if self._health_conn is not None else [])]
        with open(os.devnull, "r+b") as devnull:
            for conn in inherited:
                with suppress(Exception):  # closed or broken already: nothing to detach
                    os.dup2(devnull.fileno(), conn.pgconn.socket)
        _INHERITED.append((self.pool, inherited))
        self._conns = weakref.WeakSet()
        self._last_used = weakref.WeakKeyDictionary()
        self._health_lock = threading.Lock()
        self._health_running = None
        self._health_conn = None
        self._fold_dice = random.Random()  # not the parent's sequence: siblings would fold counts in step
        # The parent's retry thread is not here, and its lock may have been held at the fork.
        self._erase_retry = self._new_erase_retry()
        self._retry_conn = None
        self._retry_said_unreadable = False
        if self._closed:
            self._erase_retry.stop(wait=0.0)
        else:
            self.pool = self._new_pool()

    def _configure(self, conn: _Conn) -> None:
        self._conns.add(conn)
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        # Every statement is planned with its values, also once psycopg has prepared it (after five
        # runs). A generic plan over the hash-partitioned tables locks every shard, and with an array
        # of partition ids reads every shard too: an erasure's rewrite of one shard would stall every
        # partition, and a recall would grow with the whole store (8-21 ms for a 100-line partition
        # once other agents had written 16,000-48,000 lines, against 1.0-1.3 ms). Planned with its
        # values, a statement opens only its partition's shard, whatever the server's plan_cache_mode.
        conn.execute("SET plan_cache_mode = force_custom_plan")
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{int(self.statement_timeout * 1000)}",))

    def _check(self, conn: _Conn) -> None:
        """Before lending a connection: one round trip to prove it alive, unless it just was.

        A connection used less than :data:`_TRUST_RECENT` seconds ago skips the
        check (it saves a round trip per call under load); if the server went
        away in that window, the call fails with a typed error and the pool
        replaces the broken connection, like any connection lost mid-call.
        """
        last = self._last_used.get(conn)
        if last is not None and time.monotonic() - last < _TRUST_RECENT:
            return
        ConnectionPool.check_connection(conn)

    def _open_schema(self) -> None:
        try:
            conn: _Conn = psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise UpstreamError(f"cannot connect to PostgreSQL {self.where}: {_first_line(exc)}") from exc
        try:
            with conn.transaction():
                try:
                    schema.migrate(conn, self.schema)
                except schema.NewerSchema as exc:
                    raise UpstreamError(_newer_message(self.where, self.schema, exc.version)) from None
                except schema.ForeignSchema as exc:
                    raise InvalidRequest(
                        f"schema {self.schema!r} in PostgreSQL {self.where} holds tables of another application "
                        f"({', '.join(exc.tables[:5])}): set schema to a new or a memvault schema",
                        field="schema",
                    ) from None
        except psycopg.errors.InsufficientPrivilege as exc:
            raise UpstreamError(
                f"PostgreSQL {self.where} refused to create memvault's schema {self.schema!r}: "
                f"{_first_line(exc)}; grant the role CREATE on the database, or create the schema for it"
            ) from exc
        except psycopg.Error as exc:
            raise UpstreamError(
                f"PostgreSQL {self.where} failed while creating memvault's schema: {_first_line(exc)}"
            ) from exc
        finally:
            conn.close()

    @_translated("close")
    def close(self) -> None:
        """Close the pool and every connection this provider opened, and stop the retry thread. Idempotent."""
        self._closed = True
        self._stop_erase_retry()
        self.pool.close(timeout=2.0)
        # A probe stuck on a hung server holds the lock and its connection (closing a
        # connection in use would wait for it): then the probe closes it when it returns.
        if self._health_lock.acquire(timeout=1.0):
            try:
                self._drop_health_conn()
            finally:
                self._health_lock.release()

    def _drop_health_conn(self) -> None:
        conn, self._health_conn = self._health_conn, None
        if conn is not None:
            with suppress(Exception):
                conn.close()

    @contextmanager
    def _errors(self, verb: str) -> Iterator[None]:
        """Translate psycopg and pool errors into memvault's (P28), cause chained."""
        try:
            yield
        except MemvaultError:
            raise
        except PoolTimeout as exc:
            unreachable = self._unreachable()
            if unreachable:
                raise UpstreamError(
                    f"cannot connect to PostgreSQL {self.where} during {verb}: {unreachable}; the pool "
                    "reconnects by itself once the server is back"
                ) from exc
            raise UpstreamTimeout(
                f"no PostgreSQL connection became free within {self.pool_timeout:g} s during {verb} "
                f"({self.where} unreachable, or all {self.pool_size} pooled connections busy): retry, raise "
                "pool_size, or check the server"
            ) from exc
        except PoolClosed as exc:
            raise UpstreamError("the postgres provider is closed: open a new vault") from exc
        except psycopg.errors.QueryCanceled as exc:
            raise UpstreamTimeout(
                f"PostgreSQL {self.where} cancelled {verb} after the statement timeout "
                f"({self.statement_timeout:g} s): retry, or raise statement_timeout"
            ) from exc
        except psycopg.OperationalError as exc:
            raise UpstreamError(
                f"lost the connection to PostgreSQL {self.where} during {verb}: {_first_line(exc)}; "
                "a write that failed this way may or may not have been applied: read before retrying"
            ) from exc
        except psycopg.Error as exc:
            raise UpstreamError(f"PostgreSQL {self.where} failed during {verb}: {_first_line(exc)}") from exc

    def _unreachable(self) -> str:
        """Why a new connection fails right now ("" when it succeeds): names the cause of a pool timeout."""
        try:
            psycopg.connect(self._conninfo, connect_timeout=2).close()
        except psycopg.Error as exc:
            return _first_line(exc)
        return ""

    def _run(self, action: Callable[[_Conn], _T]) -> _T:
        """Run ``action`` on a pooled connection; a deadlock or serialization failure is retried.

        psycopg's errors pass through: the caller (a hook, through :func:`_translated`) translates them.
        """
        if self._closed:
            raise UpstreamError("the postgres provider is closed: open a new vault")
        for attempt in range(5):
            try:
                with self.pool.connection() as conn:
                    result = action(conn)
                    self._last_used[conn] = time.monotonic()
                    return result
            except _RETRYABLE:
                if attempt == 4:
                    raise
                time.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def _partition(self, conn: _Conn, part: Partition, *, create: bool) -> int | None:
        """The partition's id (created on first write when ``create``); only committed ids are cached."""
        key = (part.workspace_id, part.kind, part.owner_id)
        cached = self._partitions.get(key)
        if cached is not None:
            return cached
        row = conn.execute(
            "SELECT id FROM partitions WHERE workspace_id = %s AND kind = %s AND owner_id = %s", key
        ).fetchone()
        if row is None and create:
            row = conn.execute(
                "INSERT INTO partitions (workspace_id, kind, owner_id) VALUES (%s, %s, %s)"
                " ON CONFLICT (workspace_id, kind, owner_id) DO UPDATE SET kind = excluded.kind RETURNING id",
                key,
            ).fetchone()
        if row is None:
            return None
        if not create:
            self._partitions[key] = int(row[0])
        return int(row[0])

    # -- verbs -----------------------------------------------------------------

    @hookimpl
    @_translated("retain")
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        label = ref.label
        part = ref.partition
        subject = request.data_subject_id

        idempotency_key = request.idempotency_key
        fingerprint = request.fingerprint() if idempotency_key else ""

        def write(conn: _Conn) -> tuple[RetainResult, int | None]:
            with conn.transaction():
                # The time of the write, from the one clock (never the server's now(), P41).
                now = clock.now()
                if idempotency_key:
                    recorded = self._claim_key(conn, part.workspace_id, idempotency_key, fingerprint, label, now)
                    if recorded is not None:
                        nothing_written()  # no body to scan: the first write's was (P29)
                        return recorded, None  # a repeat: the first result, nothing written (P44)
                pid = self._partition(conn, part, create=True)
                assert pid is not None
                created_now = False
                while True:
                    row = conn.execute(
                        "SELECT id, body, size, subjects, sha256, expires_at, purge_at FROM documents"
                        " WHERE partition_id = %s AND tier = %s AND key = %s FOR UPDATE",
                        (pid, ref.tier.value, ref.key),
                    ).fetchone()
                    if row is not None and row[6] is not None and row[6] <= now:
                        # Expired (P41): absent already. The write starts a new document; the old one
                        # goes as a sweep removes it (its shards are rewritten at the next scrub).
                        _remove_expired(conn, [(pid, int(row[0]))])
                        continue
                    if row is not None:
                        break
                    created = conn.execute(
                        "INSERT INTO documents (partition_id, workspace_id, tier, key, label, body, size, subjects,"
                        " sha256, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, '', 0, '{}', %s, %s, %s)"
                        " ON CONFLICT (partition_id, tier, key) DO NOTHING"
                        " RETURNING id, body, size, subjects, sha256, expires_at, purge_at",
                        (pid, part.workspace_id, ref.tier.value, ref.key, label, schema.body_sha256(""), now, now),
                    ).fetchone()
                    if created is not None:
                        row = created
                        created_now = True
                        break
                    # Another writer created it first: lock theirs.
                doc_id, old_body, current, subjects = int(row[0]), str(row[1]), int(row[2]), list(row[3])
                explicit = _explicit_expiry(request, row[5], live=not created_now)
                purge = effective_expiry(explicit, now, request.retention)
                if request.mode == "append":
                    # The scanner checks the body this append extends, under the row lock. A rejection
                    # (ContentRejected) rolls the transaction back: no row, partition or tag is left.
                    check_stored(old_body, str(row[4]))
                body = old_body + request.content if request.mode == "append" else request.content
                size = len(body.encode("utf-8"))
                warning = check_cap(request.tier, current=current, projected=size)
                if subject and subject not in subjects:
                    subjects.append(subject)
                lines_delta, terms_delta = _reindex(conn, pid, doc_id, ref.tier.value, old_body, body)
                # The document and its partition's totals (tier_counts) change in one statement.
                conn.execute(
                    "WITH changed AS (UPDATE documents SET body = %s, size = %s, subjects = %s, sha256 = %s,"
                    " updated_at = %s, expires_at = %s, purge_at = %s,"
                    " line_count = line_count + %s, term_count = term_count + %s"
                    " WHERE partition_id = %s AND id = %s RETURNING partition_id, tier)"
                    " INSERT INTO tier_counts (partition_id, tier, lines, terms)"
                    " SELECT partition_id, tier, %s, %s FROM changed WHERE %s",
                    (
                        body,
                        size,
                        subjects,
                        schema.body_sha256(body),
                        now,
                        explicit,
                        purge,
                        lines_delta,
                        terms_delta,
                        pid,
                        doc_id,
                        lines_delta,
                        terms_delta,
                        bool(lines_delta or terms_delta),
                    ),
                )
                dice = self._fold_dice.random()
                if (lines_delta or terms_delta) and dice < 1 / schema.TIER_COUNTS_FOLD:
                    self._fold_counts(conn, pid, ref.tier.value, recount=dice < 1 / schema.TIER_COUNTS_RECOUNT)
                if idempotency_key:
                    # The claimed key gets the write's result, in the write's transaction (P44).
                    conn.execute(
                        "UPDATE idempotency_keys SET bytes = %s, warning = %s WHERE workspace_id = %s AND key = %s",
                        (size, warning, part.workspace_id, idempotency_key),
                    )
            return RetainResult(id=label, bytes=size, warning=warning), pid

        result, pid = self._run(write)
        if pid is not None:
            self._partitions.setdefault((part.workspace_id, part.kind, part.owner_id), pid)
        return result

    def _claim_key(
        self, conn: _Conn, workspace_id: str, key: str, fingerprint: str, label: str, now: _dt.datetime
    ) -> RetainResult | None:
        """Claim ``key`` for this transaction's write, or answer the write that holds it (P44).

        The key's primary key decides between concurrent first uses (threads, processes, replicas on
        one database): the second INSERT waits for the first transaction; if that commits, the key is
        taken and its recorded result is read; if it rolls back (a failed write records no key), the
        second claims it and writes.

        :return: ``None`` when claimed (write, then record the result); else the recorded result.
        :raises IdempotencyConflict: the key holds another write.
        """
        claimed = conn.execute(
            "INSERT INTO idempotency_keys (workspace_id, key, fingerprint, result_id, bytes, warning, recorded_at)"
            " VALUES (%s, %s, %s, %s, 0, '', %s) ON CONFLICT (workspace_id, key) DO NOTHING RETURNING 1",
            (workspace_id, key, fingerprint, label, now),
        ).fetchone()
        if claimed is not None:
            return None
        row = conn.execute(
            "SELECT fingerprint, result_id, bytes, warning FROM idempotency_keys WHERE workspace_id = %s AND key = %s",
            (workspace_id, key),
        ).fetchone()
        if row is None:  # pruned between the two statements: as if never used
            raise psycopg.errors.SerializationFailure("idempotency key vanished; retry")
        if str(row[0]) != fingerprint:
            raise IdempotencyConflict(key=key, workspace_id=workspace_id)
        return RetainResult(id=str(row[1]), bytes=int(row[2]), warning=str(row[3]))

    def _fold_counts(self, conn: _Conn, pid: int, tier: str, *, recount: bool) -> None:
        """Replace the partition's change rows for ``tier`` by one row of their sum.

        Runs inside a write's transaction. The try-lock comes first, in its own
        statement, so the fold's snapshot sees every earlier fold committed, and
        only one transaction folds a partition's tier at a time (the others skip
        it, never wait). A fold sums exactly the rows its DELETE removed, so
        change rows other transactions have not committed stay and add up once
        they commit. With ``recount`` the row is the documents' totals instead
        (the same holds: uncommitted changes are in neither), which mends any
        change row a write missed (a writer of an older schema during an
        upgrade); it sums every document of the tier, hence only now and then.
        """
        key = f"memvault-tier-counts:{self.schema}:{pid}:{tier}"
        row = conn.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", (key,)).fetchone()
        if not (row and row[0]):
            return
        if recount:
            conn.execute(
                "WITH gone AS (DELETE FROM tier_counts WHERE partition_id = %(p)s AND tier = %(t)s)"
                " INSERT INTO tier_counts (partition_id, tier, lines, terms)"
                " SELECT %(p)s, %(t)s, sum(line_count), sum(term_count) FROM documents"
                " WHERE partition_id = %(p)s AND tier = %(t)s HAVING sum(line_count) <> 0 OR sum(term_count) <> 0",
                {"p": pid, "t": tier},
            )
        else:
            conn.execute(
                "WITH gone AS (DELETE FROM tier_counts WHERE partition_id = %(p)s AND tier = %(t)s"
                " RETURNING lines, terms)"
                " INSERT INTO tier_counts (partition_id, tier, lines, terms)"
                " SELECT %(p)s, %(t)s, sum(lines), sum(terms) FROM gone HAVING sum(lines) <> 0 OR sum(terms) <> 0",
                {"p": pid, "t": tier},
            )

    @hookimpl
    @_translated("recall")
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        query = text.Query.parse(request.query)
        terms = index_terms(query, MAX_TERM)
        vector = request.vector
        if not terms and vector is None:
            return RecallResult(hits=[])
        # Fused with the lines closest in meaning (P36): the lexical ranking FUSION_DEPTH deep.
        depth = text.FUSION_DEPTH if vector is not None else request.limit

        def search(conn: _Conn) -> RecallResult:
            pids: list[int] = []
            tier_values: list[str] = []
            for partition, tiers in request.scopes():
                pid = self._partition(conn, partition, create=False)
                if pid is not None:
                    pids.append(pid)
                    # An agent partition holds only agent tiers and a crew partition only CREW,
                    # so one tier list for all the scopes selects exactly each scope's tiers.
                    tier_values.extend(t.value for t in tiers)
            if not pids:
                return RecallResult(hits=[])
            searched = {"pids": pids, "tiers": tier_values, "now": clock.now()}
            hits = self._lexical(conn, query, terms, searched, depth) if terms else []
            if vector is not None:
                hits = _fused(conn, query, vector, searched, hits, request.limit)
            return RecallResult(hits=hits)

        return self._run(search)

    def _lexical(
        self, conn: _Conn, query: text.Query, terms: Sequence[str], searched: dict[str, Any], limit: int
    ) -> list[RecallSnippet]:
        """The best ``limit`` lines of the searched partitions and tiers by their words."""
        pids = searched["pids"]
        # One statement, so one snapshot: the statistics and the candidates agree, in one round trip.
        # (Past the budget the narrowing reads the lines again: counting them here first, to send
        # none, cost every recall 0.2 ms more on LoCoMo questions.)
        rows = conn.execute(
            # Less the lines of expired documents not swept yet: the statistics of the live lines (P41).
            f"WITH gone AS ({_EXPIRED_COUNTS}),"
            " stats AS (SELECT coalesce(sum(lines), 0) - (SELECT lines FROM gone) AS lines,"
            " coalesce(sum(terms), 0) - (SELECT terms FROM gone) AS terms, (SELECT lines FROM gone) AS gone"
            " FROM tier_counts WHERE partition_id = ANY(%(pids)s) AND tier = ANY(%(tiers)s))"
            " SELECT s.lines, s.terms, s.gone, c.* FROM stats AS s LEFT JOIN LATERAL ("
            f" {_CANDIDATES} AND l.tsv @@ %(query)s::tsquery LIMIT %(probe)s) AS c ON true",
            {**searched, "query": " | ".join(ts_query(pid, terms) for pid in pids), "probe": CANDIDATE_BUDGET + 1},
        ).fetchall()
        line_count, term_count, expired = int(rows[0][0]), int(rows[0][1]), bool(rows[0][2])
        found = [r[3:] for r in rows if r[3] is not None]
        df: list[int] | None = None
        if len(found) > CANDIDATE_BUDGET:
            # Many lines share a term (common words, a long history): the subset sqlite scores.
            line_count, term_count, df, found = _narrowed(conn, searched, terms, limit, expired=expired)
        candidates = [(i, r[0], r[1], r[2], r[4], r[5]) for i, r in enumerate(found)]

        def texts(ids: Sequence[int]) -> dict[int, tuple[str, str]]:
            # Each hit names its document's digest (same snapshot), so the scanner needs no read-back.
            return {i: (str(found[i][3]), str(found[i][6])) for i in ids}

        return rank_candidates(
            query,
            candidates,
            line_count=line_count,
            term_count=term_count,
            limit=limit,
            texts=texts,
            df=df,
            max_chars=MAX_TERM,
        )

    # -- vectors (P37) ---------------------------------------------------------

    @hookimpl
    @_translated("vectors")
    def memvault_vectors_pending(self, model_id: str, limit: int) -> list[PendingLine]:
        def pending(conn: _Conn) -> list[PendingLine]:
            rows: list[tuple[Any, ...]] = []
            with conn.transaction():
                _index_only(conn)
                # Lines without a vector, then lines whose vector is of another model: three ranges
                # of the index on model, never a scan of the vectors.
                for clause in ("v.model IS NULL", "v.model < %(m)s", "v.model > %(m)s"):
                    if len(rows) < limit:
                        rows += conn.execute(
                            "SELECT v.partition_id, v.document_id, v.line_no, v.digest, l.text FROM line_vectors AS v"
                            " JOIN lines AS l ON l.partition_id = v.partition_id AND l.document_id = v.document_id"
                            f" AND l.line_no = v.line_no WHERE {clause} LIMIT %(n)s",
                            {"m": model_id, "n": limit - len(rows)},
                        ).fetchall()
            return [
                PendingLine(key=f"{pid}:{doc}:{number}:{digest}", text=str(line))
                for pid, doc, number, digest, line in rows
            ]

        return self._run(pending)

    @hookimpl
    @_translated("vectors")
    def memvault_vectors_store(self, model_id: str, vectors: list[tuple[str, bytes]]) -> int:
        items = []
        for key, blob in vectors:
            parts = str(key).split(":")
            if len(parts) == 4 and all(p.isdigit() for p in parts[:3]) and isinstance(blob, (bytes, bytearray)):
                items.append((model_id, bytes(blob), int(parts[0]), int(parts[1]), int(parts[2]), parts[3]))
        if not items:
            return 0

        def store(conn: _Conn) -> int:
            with conn.transaction(), conn.cursor() as cur:
                # Only where the line still holds the text the vector was made from (its digest): a
                # line changed or removed since was deleted with its row, so the key matches nothing
                # (P37). A vector of another model is replaced.
                cur.executemany(
                    "UPDATE line_vectors SET model = %s, vector = %s"
                    " WHERE partition_id = %s AND document_id = %s AND line_no = %s AND digest = %s RETURNING 1",
                    items,
                    returning=True,
                )
                stored = 0
                while True:
                    stored += len(cur.fetchall())
                    if not cur.nextset():
                        break
                return stored

        return self._run(store)

    @hookimpl
    @_translated("vectors")
    def memvault_vectors_backlog(self, model_id: str) -> int:
        def backlog(conn: _Conn) -> int:
            with conn.transaction():
                _index_only(conn)
                row = conn.execute(
                    "SELECT (SELECT count(*) FROM line_vectors WHERE model IS NULL)"
                    " + (SELECT count(*) FROM line_vectors WHERE model < %(m)s)"
                    " + (SELECT count(*) FROM line_vectors WHERE model > %(m)s)",
                    {"m": model_id},
                ).fetchone()
            return int(row[0]) if row else 0

        return self._run(backlog)

    @hookimpl
    @_translated("read")
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        ref = request.ref

        def read(conn: _Conn) -> ReadResult:
            # By the partition's id, so the planner opens only its shard.
            pid = self._partition(conn, ref.partition, create=False)
            row = None
            if pid is not None:
                row = conn.execute(
                    "SELECT body FROM documents WHERE partition_id = %s AND tier = %s AND key = %s"
                    " AND (purge_at IS NULL OR purge_at > %s)",  # expired: absent (P41)
                    (pid, ref.tier.value, ref.key, clock.now()),
                ).fetchone()
            return ReadResult(id=ref.label, content=str(row[0]) if row else "")

        return self._run(read)

    @hookimpl
    @_translated("forget")
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        def erase(conn: _Conn) -> int:
            with conn.transaction():
                now = clock.now()
                if request.id:
                    ref = request.ref
                    pid = self._partition(conn, ref.partition, create=False)
                    rows = []
                    if pid is not None:
                        rows = conn.execute(
                            "SELECT d.partition_id, d.id, c.relname, d.purge_at FROM documents AS d"
                            " JOIN pg_class AS c ON c.oid = d.tableoid"
                            " WHERE d.partition_id = %s AND d.tier = %s AND d.key = %s FOR UPDATE OF d",
                            (pid, ref.tier.value, ref.key),
                        ).fetchall()
                        # The rows go, their bytes stay in the shard's files (no rewrite here): a later
                        # erasure of any subject that wrote to the document must find and scrub them (P24).
                        for row_pid, doc_id, shard, _purge in rows:
                            conn.execute(
                                "INSERT INTO forgotten_subjects (workspace_id, data_subject_id, partition_id, label,"
                                " documents_shard, lines_shard, forgotten_at)"
                                " SELECT d.workspace_id, s.subject, d.partition_id, d.label, %s, %s, now()"
                                " FROM documents AS d, unnest(d.subjects) AS s(subject)"
                                " WHERE d.partition_id = %s AND d.id = %s"
                                " ON CONFLICT (workspace_id, data_subject_id, partition_id, label)"
                                " DO UPDATE SET documents_shard = excluded.documents_shard,"
                                " lines_shard = excluded.lines_shard, forgotten_at = excluded.forgotten_at",
                                (shard, _lines_shard(shard), row_pid, doc_id),
                            )
                else:
                    rows = conn.execute(
                        "SELECT d.partition_id, d.id, c.relname, d.purge_at FROM documents AS d"
                        " JOIN pg_class AS c ON c.oid = d.tableoid"
                        " WHERE d.workspace_id = %s AND d.subjects @> ARRAY[%s]::text[]"
                        " ORDER BY d.partition_id, d.id FOR UPDATE OF d",
                        (request.workspace_id, request.data_subject_id),
                    ).fetchall()
                quarantined = 0
                left: list[tuple[Any, ...]] = []
                if request.data_subject_id:
                    # What forgets by id left of the subject's documents: their shards' files still
                    # hold the text, and quarantine copies of rejected appends to them (kept until
                    # the forget) still hold it too.
                    left = conn.execute(
                        "DELETE FROM forgotten_subjects WHERE workspace_id = %s AND data_subject_id = %s"
                        " RETURNING partition_id, label, documents_shard, lines_shard, forgotten_at",
                        (request.workspace_id, request.data_subject_id),
                    ).fetchall()
                    # Quarantine copies are derived data too (P24): those of the subject's rejected writes,
                    # and those of rejected appends to a document erased here (a copy is the final body,
                    # so it holds the document's text), whoever wrote them. Before the documents go.
                    quarantined = conn.execute(
                        "DELETE FROM quarantine AS q WHERE q.workspace_id = %s AND (q.data_subject_id = %s"
                        " OR EXISTS (SELECT 1 FROM documents AS d JOIN partitions AS p ON p.id = d.partition_id"
                        " WHERE d.workspace_id = q.workspace_id AND d.subjects @> ARRAY[%s]::text[]"
                        " AND d.label = q.label AND ((p.kind = 'agent' AND q.agent_id = p.owner_id"
                        " AND q.crew_id = '') OR (p.kind = 'crew' AND q.crew_id = p.owner_id AND q.agent_id = '')))"
                        " OR EXISTS (SELECT 1 FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[])"
                        " AS f(partition_id, label, forgotten_at) JOIN partitions AS p ON p.id = f.partition_id"
                        " WHERE f.label = q.label AND q.created_at <= f.forgotten_at"
                        " AND ((p.kind = 'agent' AND q.agent_id = p.owner_id AND q.crew_id = '')"
                        " OR (p.kind = 'crew' AND q.crew_id = p.owner_id AND q.agent_id = ''))))",
                        (
                            request.workspace_id,
                            request.data_subject_id,
                            request.data_subject_id,
                            [int(f[0]) for f in left],
                            [str(f[1]) for f in left],
                            [f[4] for f in left],
                        ),
                    ).rowcount
                for pid, doc_id, _shard, _purge in rows:
                    # The document's lines and their vectors (derived data: P24) in one statement.
                    conn.execute(
                        "WITH v AS (DELETE FROM line_vectors WHERE partition_id = %(p)s AND document_id = %(d)s)"
                        " DELETE FROM lines WHERE partition_id = %(p)s AND document_id = %(d)s",
                        {"p": pid, "d": doc_id},
                    )
                    conn.execute(
                        "WITH gone AS (DELETE FROM documents WHERE partition_id = %s AND id = %s"
                        " RETURNING partition_id, tier, line_count, term_count)"
                        " INSERT INTO tier_counts (partition_id, tier, lines, terms)"
                        " SELECT partition_id, tier, -line_count, -term_count FROM gone"
                        " WHERE line_count <> 0 OR term_count <> 0",
                        (pid, doc_id),
                    )
                if request.data_subject_id:
                    # The rows are gone; their bytes stay in the table files until the shards are
                    # rewritten. Record that durably, in the same transaction, before saying anything.
                    relations = {str(shard) for _pid, _doc, shard, _purge in rows}
                    relations |= {str(shard) for f in left for shard in (f[2], f[3])}
                    # Each documents shard's lines and vectors shards (the same hash of the partition id).
                    relations |= {
                        f"{table}_{shard.rsplit('_', 1)[1]}"
                        for shard in list(relations)
                        for table in ("lines", "line_vectors")
                    }
                    if left:
                        relations.add("forgotten_subjects")  # its rows named the subject
                    if quarantined:
                        relations.add("quarantine")
                    for relation in sorted(relations):
                        conn.execute(
                            "INSERT INTO erasures (relation, requested_at) VALUES (%s, now())"
                            " ON CONFLICT (relation) DO UPDATE SET requested_at = excluded.requested_at",
                            (relation,),
                        )
            # An expired document is removed all the same, but was absent already (P41): not counted.
            return sum(1 for *_row, purge in rows if purge is None or purge > now)

        removed = self._run(erase)
        pending = self._run(functools.partial(self._scrub, wait=self.erase_lock_timeout))
        if pending:
            self._erase_retry.kick(again=bool(request.data_subject_id))
        if pending and request.data_subject_id:
            return _pending_result(removed, pending, self.where)
        return ForgetResult(removed=removed)

    def _scrub(
        self,
        conn: _Conn,
        wait: float = 0.0,
        *,
        relations: Sequence[str] | None = None,
        tries: int = 3,
        lock_wait: float | None = None,
    ) -> list[str]:
        """Rewrite every table an erasure touched, so the erased text leaves the table and index files.

        ``VACUUM FULL`` writes a shard's live rows (and its indexes) into new
        files and truncates the old ones. It copies a deleted row too while an
        older transaction may still see it; then the shard stays recorded and a
        later call (the background retry, the next forget, or the next open) rewrites it again.
        Whether it did is read from VACUUM's report (in ``C`` where the role may set ``lc_messages``:
        :func:`_untranslated`). A report that cannot be read confirms nothing: each relation is then
        rewritten once, stays recorded, and a warning says what to grant.

        :param wait: seconds over the whole call a forget waits out a transaction that ends soon (an
            autovacuum's ANALYZE, a short report): the rewrite is tried again, the pauses doubling (at least
            three tries a relation; three tries within 0.3 s left an erasure pending behind a reader of half
            a second). The other callers (a start, a sweep, a quarantine purge) pass 0: three quick tries,
            so a long reader does not hold up a start.
        :param relations: only these of the recorded relations (the background retry's ready ones).
        :param tries: the fewest tries a relation gets.
        :param lock_wait: seconds each rewrite waits for its lock (default: ``erase_lock_timeout``).

        :return: the relations (of those tried) still pending.
        """
        pending: list[str] = []
        recorded = [str(r[0]) for r in conn.execute("SELECT relation FROM erasures ORDER BY relation")]
        if relations is not None:
            recorded = [r for r in recorded if r in set(relations)]
        if not recorded:
            return pending
        deadline = time.monotonic() + wait
        #: Set once a report could not be read: each relation left is rewritten once (its bytes go if
        #: nothing holds them) and stays recorded, since another rewrite would tell no more.
        unreadable = False
        with _untranslated(conn) as readable:
            for relation in recorded:
                attempt = 0
                while True:
                    started = conn.execute("SELECT clock_timestamp()").fetchone()
                    assert started is not None
                    wait_lock = self.erase_lock_timeout if lock_wait is None else lock_wait
                    scrubbed = self._vacuum_full(conn, relation, wait_lock)
                    if scrubbed:
                        conn.execute(
                            "DELETE FROM erasures WHERE relation = %s AND requested_at <= %s", (relation, started[0])
                        )
                        break
                    if scrubbed is None and not readable and not unreadable:
                        unreadable = True
                        log.warning("%s", self._unreadable_report(conn))
                    if unreadable:
                        break
                    attempt += 1
                    pause = min(0.05 * 2 ** (attempt - 1), 0.5)
                    if attempt >= tries and time.monotonic() + pause > deadline:
                        break
                    time.sleep(pause)
                if not scrubbed:
                    pending.append(relation)
        return pending

    def _unreadable_report(self, conn: _Conn) -> str:
        """What an operator reads when VACUUM's report is in a language the provider cannot read, and the
        role may not set ``lc_messages`` for its VACUUMs (see :func:`_untranslated`): what to run."""
        row = conn.execute("SELECT current_user, current_setting('lc_messages')").fetchone()
        assert row is not None
        role = sql.Identifier(str(row[0])).as_string(conn)
        if conn.info.server_version >= 150000:
            fix = (
                f"as a superuser, run GRANT SET ON PARAMETER lc_messages TO {role} (it applies at once: the "
                f"background retry then finishes the pending erasures), or ALTER ROLE {role} SET lc_messages = 'C' "
                "(it applies to new connections: restart the process)"
            )
        else:
            fix = (
                f"as a superuser, run ALTER ROLE {role} SET lc_messages = 'C' (it applies to new connections: "
                "restart the process; before PostgreSQL 15 only a superuser may set lc_messages in a session)"
            )
        return (
            f"PostgreSQL {self.where}: VACUUM reports in the server's message language (lc_messages = "
            f"{str(row[1])!r}), which memvault cannot read, and role {role} may not set lc_messages to 'C' for "
            "its VACUUMs; so no erasure can be confirmed to have left the table files: each stays pending "
            f"(health counts it) and recorded, and is never reported complete. To let them finish, {fix}"
        )

    def _vacuum_full(self, conn: _Conn, relation: str, lock_wait: float) -> bool | None:
        """``VACUUM FULL`` one relation, waiting at most ``lock_wait`` s for its lock.

        :return: True when it left no dead row behind; False when it kept some, or did not get the lock;
            ``None`` when its report has no statistics in English (the server's messages in another
            language, or no report at all): it cannot tell.
        """
        try:
            with _notices(conn) as details, _lock_timeout(conn, lock_wait):
                conn.execute(sql.SQL("VACUUM (FULL, VERBOSE) {}").format(sql.Identifier(relation)))
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
            return False
        except psycopg.errors.UndefinedTable:
            return True  # dropped since: nothing left to rewrite
        kept = [int(m.group(1)) for d in details for m in [_RECENTLY_DEAD.search(d)] if m]
        if not kept:
            return None
        return not any(kept)

    # -- the background retry of pending erasures (P24) -------------------------

    def _new_erase_retry(self) -> RetryLoop:
        return RetryLoop(
            self._erase_retry_round,
            interval=self.erase_retry_interval,
            name=f"memvault-postgres-erase-retry-{self.schema}",
        )

    def _stop_erase_retry(self) -> None:
        """Stop the retry thread: a round in progress ends within its lock wait; a rewrite still running
        after that (a large shard) is cancelled, and its erasure stays recorded for the next open."""
        if self._erase_retry.stop(wait=ERASE_RETRY_LOCK_WAIT + 0.5):
            return
        conn = self._retry_conn
        if conn is not None:
            with suppress(Exception):
                conn.cancel_safe(timeout=0.5)
        self._erase_retry.stop(wait=2.0)

    def _erase_retry_round(self) -> bool:
        """One round of the background retry: True when no erasure is pending any more, else False."""
        with self._errors("erase retry"):
            return self._run(self._retry_pending)

    def _retry_pending(self, conn: _Conn) -> bool:
        """Rewrite the recorded relations that a rewrite can scrub now, each waiting at most
        :data:`ERASE_RETRY_LOCK_WAIT` for its lock.

        Under a session advisory lock on the schema, so that of several processes (replicas) on one
        store one rewrites and the others leave the round to it. A rewrite copies a deleted row that
        an older transaction may still see, so a relation is rewritten only once VACUUM's cutoff has
        passed the transaction that recorded it (the ``xmin`` of its ``erasures`` row: the erasure's
        own, or a later one's): a long report or ``pg_dump`` costs a round a plain ``VACUUM`` of the
        small ``erasures`` table, not a rewrite of the shard. When that VACUUM's report cannot be read
        (see :func:`_untranslated`), the round rewrites nothing and says why, once until a report is
        read again; the rounds go on, so a grant lets the next one finish the erasures.
        """
        key = f"memvault-erase-retry:{self.schema}"
        row = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (key,)).fetchone()
        if not (row and row[0]):
            return False  # another process's retry is at it
        self._retry_conn = conn
        try:
            if not _erasures_recorded(conn):
                return True
            with _untranslated(conn) as readable:
                try:
                    cutoff = _removable_cutoff(conn, min(self.erase_lock_timeout, ERASE_RETRY_LOCK_WAIT))
                except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
                    return False  # another VACUUM of the erasures table: next round
                if cutoff is None:
                    if not self._retry_said_unreadable:
                        self._retry_said_unreadable = True
                        if readable:
                            log.warning(
                                "PostgreSQL %s: the report of VACUUM (VERBOSE) erasures named no removable "
                                "cutoff, so the background retry cannot tell when a rewrite would finish the "
                                "pending erasures; it asks again at each round (up to a minute apart)",
                                self.where,
                            )
                        else:
                            log.warning("%s", self._unreadable_report(conn))
                    return False
                self._retry_said_unreadable = False
                ready = [
                    str(r[0])
                    for r in conn.execute(
                        "SELECT relation FROM erasures WHERE age(xmin) > age(%s::text::xid) ORDER BY relation",
                        (str(cutoff),),
                    )
                ]
                if ready:
                    lock_wait = min(self.erase_lock_timeout, ERASE_RETRY_LOCK_WAIT)
                    self._scrub(conn, relations=ready, tries=1, lock_wait=lock_wait)
            return not _erasures_recorded(conn)
        finally:
            self._retry_conn = None
            try:
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (key,))
            except psycopg.Error:
                conn.close()  # the pool drops it, and its session's lock goes with it

    @hookimpl
    @_translated("list_documents")
    def memvault_list_documents(self, request: ListDocumentsRequest) -> ListDocumentsResult:
        """Every matching document without its body (P32), from one snapshot."""
        where: list[str] = []
        params: list[str] = []
        if request.workspace_id:
            where.append("d.workspace_id = %s")
            params.append(request.workspace_id)
        if request.tier is not None:
            where.append("d.tier = %s")
            params.append(request.tier.value)
        owners = []
        for kind, owner in (("agent", request.agent_id), ("crew", request.crew_id)):
            if owner:
                owners.append(f"(p.kind = '{kind}' AND p.owner_id = %s)")
                params.append(owner)
        if owners:
            where.append("(" + " OR ".join(owners) + ")")
        where.append("(d.purge_at IS NULL OR d.purge_at > %s)")  # an expired document is absent (P41)
        query = f"SELECT {_INFO_COLUMNS} FROM documents AS d JOIN partitions AS p ON p.id = d.partition_id WHERE " + (
            " AND ".join(where)
        )

        def listing(conn: _Conn) -> ListDocumentsResult:
            rows = conn.execute(query, [*params, clock.now()]).fetchall()
            return ListDocumentsResult(documents=[_info(row) for row in rows])

        return self._run(listing)

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        return self._health()

    def _health(self, *, again: bool = True) -> HealthStatus:
        """Probe on a dedicated connection within :data:`HEALTH_DEADLINE`, whatever the pool's state (P26)."""
        if self._closed:
            return HealthStatus(ok=False, message="the postgres provider is closed")
        if not self._health_lock.acquire(blocking=False):
            # A probe is running (another thread's call): its answer is this call's too. Saying not ok
            # because a probe is in flight made health flap whenever two monitors probed at once.
            running = self._health_running
            if running is None and again:  # it was starting or had just ended: look once more
                return self._health(again=False)
            if running is not None and running[0].wait(HEALTH_DEADLINE) and running[1]:
                return running[1][0]
            return HealthStatus(ok=False, message="health check timeout")
        outcome: list[HealthStatus] = []
        done = threading.Event()
        self._health_running = (done, outcome)

        def probe() -> None:
            try:
                outcome.append(self._probe())
            finally:
                if self._closed:
                    self._drop_health_conn()
                done.set()
                self._health_running = None
                self._health_lock.release()

        threading.Thread(target=probe, name="memvault-postgres-health", daemon=True).start()
        if done.wait(HEALTH_DEADLINE) and outcome:
            return outcome[0]
        conn = self._health_conn
        if conn is not None:
            # Unblock the stuck probe; its connection is rebuilt next time.
            with suppress(Exception):
                conn.cancel_safe(timeout=0.05)
        return HealthStatus(ok=False, message="health check timeout")

    def _probe(self) -> HealthStatus:
        try:
            conn = self._health_conn
            if conn is None or conn.closed or conn.broken:
                if conn is not None:
                    conn.close()
                self._health_conn = None
                conn = psycopg.connect(self._conninfo, autocommit=True)
                self._health_conn = conn
            ms = str(int(HEALTH_DEADLINE * 1000))
            with conn.transaction(force_rollback=True):
                conn.execute("SELECT set_config('statement_timeout', %s, true)", (ms,))
                conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(self.schema)))
                row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                version = int(str(row[0])) if row else 0
                if version > schema.SCHEMA_VERSION:
                    return HealthStatus(ok=False, message=_newer_message(self.where, self.schema, version))
                conn.execute("INSERT INTO probe (id) VALUES (1)")
                # Expired and not swept yet (P43): a range of the partial index on purge_at.
                overdue = conn.execute(
                    "SELECT count(*) FROM documents WHERE purge_at IS NOT NULL AND purge_at <= %s", (clock.now(),)
                ).fetchone()
                # Erasures whose shards still wait for their rewrite (P24). One forget records its shards in
                # one transaction (one requested_at); a later one that needs the same shard takes it over.
                pending = conn.execute("SELECT count(DISTINCT requested_at) FROM erasures").fetchone()
        except psycopg.Error as exc:
            if self._health_conn is not None and (self._health_conn.broken or self._health_conn.closed):
                self._health_conn.close()
                self._health_conn = None
            return HealthStatus(ok=False, message=_health_message(exc, self.where, self.schema))
        if pending and pending[0]:
            # Recorded by this process or another (a replica, one that stopped): retry it here too (P24).
            self._erase_retry.kick()
        return HealthStatus(
            ok=True,
            retention_overdue=int(overdue[0]) if overdue else 0,
            pending_erasures=int(pending[0]) if pending else 0,
        )

    # -- memory over time (P41-P45) -------------------------------------------

    @hookimpl
    @_translated("sweep_expired")
    def memvault_sweep_expired(self, request: SweepRequest) -> SweepResult:
        """Expired documents go in short transactions through the erasure path (lines, vectors,
        statistics, quarantine copies), each recording the shards it touched; once the last batch
        is done those shards' files are rewritten as an erasure's are (P24, P43)."""

        def due(conn: _Conn) -> tuple[list[tuple[DocumentInfo, int, int, int]], bool, int, int]:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                keys = _due_documents(conn, request)
                more = len(keys) > request.limit
                keys = keys[: request.limit]
                rows = conn.execute(
                    f"SELECT {_INFO_COLUMNS}, d.line_count, d.partition_id, d.id"
                    " FROM documents AS d JOIN partitions AS p ON p.id = d.partition_id"
                    " JOIN unnest(%s::bigint[], %s::bigint[]) WITH ORDINALITY AS k(pid, doc, n)"
                    " ON d.partition_id = k.pid AND d.id = k.doc ORDER BY k.n",
                    ([k[0] for k in keys], [k[1] for k in keys]),
                ).fetchall()
                documents = [(_info(row[:-3]), int(row[-3]), int(row[-2]), int(row[-1])) for row in rows]
                quarantined = keys_due = 0
                if request.dry_run:
                    found = conn.execute(
                        "SELECT count(*) FROM quarantine WHERE expires_at IS NOT NULL AND expires_at <= %s",
                        (request.now,),
                    ).fetchone()
                    quarantined = int(found[0]) if found else 0
                    if request.keys_before is not None:
                        found = conn.execute(
                            "SELECT count(*) FROM idempotency_keys WHERE recorded_at < %s", (request.keys_before,)
                        ).fetchone()
                        keys_due = int(found[0]) if found else 0
            return documents, more, quarantined, keys_due

        documents, more, quarantined, keys = self._run(due)
        if request.dry_run:
            return SweepResult(
                documents=[d[0] for d in documents], quarantine_removed=quarantined, keys_removed=keys, more=more
            )
        removed: list[DocumentInfo] = []
        batch: list[tuple[DocumentInfo, int, int, int]] = []
        for index, item in enumerate(documents):
            batch.append(item)
            if (
                index == len(documents) - 1
                or len(batch) >= SWEEP_BATCH_DOCUMENTS
                or sum(d[1] for d in batch) >= SWEEP_BATCH_LINES
            ):
                ids = [(d[2], d[3]) for d in batch]
                gone, copies = self._run(functools.partial(_sweep_batch, ids=ids, request=request))
                removed.extend(d[0] for d in batch if (d[2], d[3]) in gone)
                quarantined += copies
                batch = []

        def expired_copies(conn: _Conn) -> int:
            with conn.transaction():
                count = conn.execute(
                    "DELETE FROM quarantine WHERE expires_at IS NOT NULL AND expires_at <= %s", (request.now,)
                ).rowcount
                if count:
                    _record_erasure(conn, ["quarantine"])
            return count

        quarantined += self._run(expired_copies)
        if request.keys_before is not None:
            while True:
                pruned = self._run(functools.partial(_prune_keys, before=request.keys_before))
                keys += pruned
                if pruned < _KEYS_BATCH:
                    break
        if not more:
            pending = self._run(self._scrub)
            if pending:
                self._erase_retry.kick(again=True)
                log.warning(
                    "PostgreSQL %s: swept rows are gone, but the files of %s may still hold their text (a lock or"
                    " an old snapshot); a background retry rewrites them once it can (or the next sweep or forget)",
                    self.where,
                    ", ".join(pending),
                )
        return SweepResult(documents=removed, quarantine_removed=quarantined, keys_removed=keys, more=more)

    # -- quarantine (P30) ------------------------------------------------------

    @hookimpl
    @_translated("quarantine_keep")
    def memvault_quarantine_keep(self, record: _QuarantineRecord) -> bool:
        def keep(conn: _Conn) -> bool:
            conn.execute(
                f"INSERT INTO quarantine ({_QCOLS}) VALUES ({', '.join(['%s'] * len(_QFIELDS))})",
                tuple(getattr(record, name) for name in _QFIELDS),
            )
            return True

        return self._run(keep)

    @hookimpl
    @_translated("quarantine_list")
    def memvault_quarantine_list(self, workspace_id: str) -> list[_QuarantineRecord]:
        def listing(conn: _Conn) -> list[_QuarantineRecord]:
            rows = conn.execute(
                f"SELECT {_QCOLS} FROM quarantine WHERE workspace_id = %s"
                " AND (expires_at IS NULL OR expires_at > %s) ORDER BY id",  # expired copies are absent (P41)
                (workspace_id, clock.now()),
            ).fetchall()
            return [_record(r) for r in rows]

        return self._run(listing)

    @hookimpl
    @_translated("quarantine_get")
    def memvault_quarantine_get(self, workspace_id: str, sha256: str) -> _QuarantineRecord | None:
        def get(conn: _Conn) -> _QuarantineRecord | None:
            row = conn.execute(
                f"SELECT {_QCOLS} FROM quarantine WHERE workspace_id = %s AND sha256 = %s"
                " AND (expires_at IS NULL OR expires_at > %s) ORDER BY id DESC LIMIT 1",
                (workspace_id, sha256, clock.now()),
            ).fetchone()
            return _record(row) if row else None

        return self._run(get)

    @hookimpl
    @_translated("quarantine_delete")
    def memvault_quarantine_delete(self, workspace_id: str, sha256: str) -> int:
        """Every copy of the body goes, as an erasure's would: the quarantine table is recorded for a
        rewrite (``VACUUM FULL``) in the same transaction, and rewritten before this returns when it can
        be; otherwise it stays a pending erasure (health counts it) that the background retry, the next
        forget or the next open finishes.
        """

        def delete(conn: _Conn) -> int:
            with conn.transaction():
                deleted = conn.execute(
                    "DELETE FROM quarantine WHERE workspace_id = %s AND sha256 = %s", (workspace_id, sha256)
                ).rowcount
                if deleted:
                    conn.execute(
                        "INSERT INTO erasures (relation, requested_at) VALUES ('quarantine', now())"
                        " ON CONFLICT (relation) DO UPDATE SET requested_at = excluded.requested_at"
                    )
            return int(deleted)

        deleted = self._run(delete)
        if deleted and self._run(self._scrub):
            self._erase_retry.kick(again=True)
        return deleted

    def __repr__(self) -> str:
        return f"<PostgresProvider {self.where} schema={self.schema!r}>"


def _reindex(conn: _Conn, pid: int, doc_id: int, tier: str, old_body: str, new_body: str) -> tuple[int, int]:
    """Bring the document's lines from ``old_body`` to ``new_body``, touching only lines that changed.

    :return: the change in indexed lines and in their total length in terms.
    """
    old_lines = old_body.splitlines()
    new_lines = new_body.splitlines()
    stale = [n for n in range(1, len(old_lines) + 1) if n > len(new_lines) or old_lines[n - 1] != new_lines[n - 1]]
    fresh = [n for n in range(1, len(new_lines) + 1) if n > len(old_lines) or old_lines[n - 1] != new_lines[n - 1]]
    lines_delta = terms_delta = 0
    if stale:
        # A line's vector row goes with it (P37): no vector ever answers for text that changed.
        removed = conn.execute(
            "WITH v AS (DELETE FROM line_vectors WHERE partition_id = %(p)s AND document_id = %(d)s"
            " AND line_no = ANY(%(n)s))"
            " DELETE FROM lines WHERE partition_id = %(p)s AND document_id = %(d)s AND line_no = ANY(%(n)s)"
            " RETURNING length",
            {"p": pid, "d": doc_id, "n": stale},
        ).fetchall()
        lines_delta -= len(removed)
        terms_delta -= sum(int(r[0]) for r in removed)
    indexed = [il for n in fresh if (il := stored_line(n, new_lines[n - 1], MAX_TERM)) is not None]
    if indexed:
        with conn.cursor() as cur:
            # Each line with its vector row, waiting for a vector (no model yet): the durable backlog (P37).
            cur.executemany(
                "WITH l AS (INSERT INTO lines (partition_id, document_id, line_no, tier, text, terms, length, tsv)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, array_to_tsvector(%s::text[]))"
                " RETURNING partition_id, document_id, line_no, tier)"
                " INSERT INTO line_vectors (partition_id, document_id, line_no, tier, digest)"
                " SELECT partition_id, document_id, line_no, tier, %s FROM l",
                [
                    (
                        pid,
                        doc_id,
                        il.number,
                        tier,
                        il.text,
                        il.terms,
                        il.length,
                        lexemes(pid, il.terms),
                        line_digest(il.text),
                    )
                    for il in indexed
                ],
            )
        lines_delta += len(indexed)
        terms_delta += sum(il.length for il in indexed)
    return lines_delta, terms_delta


def _index_only(conn: _Conn) -> None:
    """Inside a transaction: the backlog's statements read the index on ``model``. Without
    statistics yet (a new shard, just embedded) the planner guesses a third of the rows match
    and scans every shard's vectors: 270 ms instead of under 1 ms to find nothing on 20,000 lines."""
    conn.execute("SET LOCAL enable_seqscan = off")


def _fused(
    conn: _Conn,
    query: text.Query,
    vector: QueryVector,
    searched: dict[str, Any],
    lexical: list[RecallSnippet],
    limit: int,
) -> list[RecallSnippet]:
    """``lexical`` fused with the searched lines' closeness in meaning to ``vector`` (P36).

    The vectors are read with the lexical candidates' scope inside the statement (the
    partitions' ids, so only their shards are opened, and their tiers), of the query's model only (P38).
    """
    size = 2 * vector.dimensions
    rows = conn.execute(
        "SELECT d.label, v.line_no, v.partition_id, v.document_id, d.sha256, v.vector FROM line_vectors AS v"
        " JOIN documents AS d ON d.partition_id = v.partition_id AND d.id = v.document_id"
        " WHERE v.partition_id = ANY(%(pids)s) AND d.partition_id = ANY(%(pids)s) AND v.tier = ANY(%(tiers)s)"
        " AND v.model = %(model)s AND length(v.vector) = %(size)s AND (d.purge_at IS NULL OR d.purge_at > %(now)s)",
        {**searched, "model": vector.model_id, "size": size},
    ).fetchall()
    refs: list[text.LineRef] = [(str(r[0]), int(r[1])) for r in rows]
    keys = {ref: (int(r[2]), int(r[3]), str(r[4])) for ref, r in zip(refs, rows, strict=True)}
    blobs = [bytes(r[5]) for r in rows]
    similar = text.similarities(vector, refs, vectors_from_bytes(blobs, vector.dimensions), lexical)

    def line_texts(wanted: Sequence[text.LineRef]) -> dict[text.LineRef, tuple[str, str]]:
        params = [[keys[ref][i] for ref in wanted] for i in range(2)] + [[ref[1] for ref in wanted]]
        found = {
            (int(pid), int(doc), int(number)): str(line)
            for pid, doc, number, line in conn.execute(
                "SELECT l.partition_id, l.document_id, l.line_no, l.text FROM lines AS l"
                " JOIN unnest(%s::bigint[], %s::bigint[], %s::int[]) AS k(p, d, n)"
                " ON l.partition_id = k.p AND l.document_id = k.d AND l.line_no = k.n"
                " WHERE l.partition_id = ANY(%s)",
                (*params, searched["pids"]),
            )
        }
        out = {}
        for ref in wanted:
            pid, doc, digest = keys[ref]
            line = found.get((pid, doc, ref[1]))
            if line is not None:
                out[ref] = (line, digest)
        return out

    return text.fuse(query, lexical, similar, line_texts, limit)


#: The columns :func:`_info` reads, of ``documents AS d JOIN partitions AS p``.
_INFO_COLUMNS: Final = (
    "d.workspace_id, p.kind, p.owner_id, d.tier, d.label, d.size, d.subjects, d.sha256, d.updated_at, d.purge_at"
)


def _info(row: Sequence[Any]) -> DocumentInfo:
    """A document's description from a row of :data:`_INFO_COLUMNS`."""
    workspace, kind, owner, tier, label, size, subjects, digest, updated_at, purge_at = row
    return DocumentInfo(
        workspace_id=workspace,
        agent_id=owner if kind == "agent" else "",
        crew_id=owner if kind == "crew" else "",
        tier=tier,
        label=label,
        bytes=int(size),
        subjects=tuple(subjects),
        digest=digest,
        updated_at=updated_at.astimezone(_dt.timezone.utc) if updated_at is not None else None,
        expires_at=purge_at.astimezone(_dt.timezone.utc) if purge_at is not None else None,
    )


def _explicit_expiry(request: RetainRequest, stored: _dt.datetime | None, *, live: bool) -> _dt.datetime | None:
    """The explicit expiry the document has after ``request`` (P41): a replace sets it; an append keeps
    the live document's, or sets its own on a new (or expired) document, and may not change it.

    :raises InvalidRequest: an append naming another expiry than the live document's.
    """
    if request.mode != "append" or not live:
        return request.expires_at
    if request.expires_at is None or request.expires_at == stored:
        return stored
    kept = f"expires at {stored.isoformat()}" if stored is not None else "has no expiry"
    raise InvalidRequest(
        f"document {request.label} {kept}, and this append gives expires_at {request.expires_at.isoformat()}: "
        "an expiry applies to the whole document, so append with the same expires_at (or none), replace the "
        "document, or write to a key of its own",
        field="expires_at",
    )


def _record_erasure(conn: _Conn, relations: Sequence[str]) -> None:
    """Record, in the caller's transaction, relations whose files must be rewritten (see ``_scrub``)."""
    conn.execute(
        "INSERT INTO erasures (relation, requested_at) SELECT r, now() FROM unnest(%s::text[]) AS r"
        " ON CONFLICT (relation) DO UPDATE SET requested_at = excluded.requested_at",
        (sorted(set(relations)),),
    )


def _remove_expired(conn: _Conn, keys: Sequence[tuple[int, int]]) -> int:
    """Delete documents (``(partition id, document id)``) as an erasure does, in the caller's transaction:
    their lines, vectors, statistics and the quarantine copies of rejected writes to them (a copy of a
    rejected append holds the document's text); their shards are recorded for the next rewrite of
    their files (P24). A few statements for the whole set, each pruned to the partitions' shards.

    :return: how many quarantine copies went.
    """
    if not keys:
        return 0
    params = {"pids": sorted({k[0] for k in keys}), "p": [k[0] for k in keys], "d": [k[1] for k in keys]}
    pairs = "(SELECT * FROM unnest(%(p)s::bigint[], %(d)s::bigint[]))"
    conn.execute(
        f"WITH v AS (DELETE FROM line_vectors WHERE partition_id = ANY(%(pids)s)"
        f" AND (partition_id, document_id) IN {pairs})"
        f" DELETE FROM lines WHERE partition_id = ANY(%(pids)s) AND (partition_id, document_id) IN {pairs}",
        params,
    )
    gone = conn.execute(
        "WITH gone AS (DELETE FROM documents WHERE partition_id = ANY(%(pids)s)"
        f" AND (partition_id, id) IN {pairs}"
        " RETURNING partition_id, tier, line_count, term_count, label, workspace_id,"
        " (SELECT relname FROM pg_class WHERE oid = documents.tableoid) AS shard),"
        " counted AS (INSERT INTO tier_counts (partition_id, tier, lines, terms)"
        " SELECT partition_id, tier, -sum(line_count), -sum(term_count) FROM gone GROUP BY partition_id, tier"
        " HAVING sum(line_count) <> 0 OR sum(term_count) <> 0)"
        " SELECT partition_id, label, workspace_id, shard FROM gone",
        params,
    ).fetchall()
    if not gone:
        return 0
    copies = conn.execute(
        "DELETE FROM quarantine AS q USING partitions AS p,"
        " unnest(%s::bigint[], %s::text[], %s::text[]) AS g(pid, label, workspace_id)"
        " WHERE p.id = g.pid AND q.workspace_id = g.workspace_id AND q.label = g.label"
        " AND ((p.kind = 'agent' AND q.agent_id = p.owner_id AND q.crew_id = '')"
        " OR (p.kind = 'crew' AND q.crew_id = p.owner_id AND q.agent_id = ''))",
        ([int(g[0]) for g in gone], [str(g[1]) for g in gone], [str(g[2]) for g in gone]),
    ).rowcount
    numbers = {str(g[3]).rsplit("_", 1)[1] for g in gone}
    relations = [f"{table}_{n}" for n in numbers for table in ("documents", "lines", "line_vectors")]
    _record_erasure(conn, [*relations, *(["quarantine"] if copies else [])])
    return copies


def _due_documents(conn: _Conn, request: SweepRequest) -> list[tuple[int, int]]:
    """Up to ``limit + 1`` (partition id, document id) of documents due at the sweep's time, the earliest
    expired first: past their ``purge_at``, or last written at or before their (workspace, tier) cutoff."""
    wanted = request.limit + 1
    due: dict[tuple[int, int], _dt.datetime] = {}
    for pid, doc_id, when in conn.execute(
        "SELECT partition_id, id, purge_at FROM documents WHERE purge_at IS NOT NULL AND purge_at <= %s"
        " ORDER BY purge_at, partition_id, id LIMIT %s",
        (request.now, wanted),
    ):
        due[(int(pid), int(doc_id))] = when
    for cutoff in request.retention.cutoffs(request.now):
        retention = request.now - cutoff.before
        scoped: list[Any]
        if cutoff.workspace_id:
            scope, scoped = "workspace_id = %s", [cutoff.workspace_id]
        else:
            scope, scoped = "workspace_id <> ALL(%s::text[])", [sorted(cutoff.excluded)]
        for pid, doc_id, written in conn.execute(
            "SELECT partition_id, id, updated_at FROM documents WHERE tier = %s AND updated_at <= %s"
            f" AND {scope} ORDER BY updated_at, partition_id, id LIMIT %s",
            (cutoff.tier.value, cutoff.before, *scoped, wanted),
        ):
            key = (int(pid), int(doc_id))
            when = written + retention
            if key not in due or when < due[key]:
                due[key] = when
    return [key for key, _when in sorted(due.items(), key=lambda item: (item[1], item[0]))][:wanted]


def _sweep_batch(conn: _Conn, ids: list[tuple[int, int]], request: SweepRequest) -> tuple[set[tuple[int, int]], int]:
    """Delete the documents of ``ids`` still due (a write since may have renewed one), in one transaction.

    :return: the documents deleted, and how many quarantine copies went with them.
    """
    gone: set[tuple[int, int]] = set()
    with conn.transaction():
        rows = conn.execute(
            "SELECT d.partition_id, d.id, d.workspace_id, d.tier, d.updated_at, d.purge_at FROM documents AS d"
            " JOIN unnest(%s::bigint[], %s::bigint[]) AS k(pid, doc) ON d.partition_id = k.pid AND d.id = k.doc"
            " ORDER BY d.partition_id, d.id FOR UPDATE OF d",
            ([i[0] for i in ids], [i[1] for i in ids]),
        ).fetchall()
        for pid, doc_id, workspace_id, tier, written, purge in rows:
            if not (
                (purge is not None and purge <= request.now)
                or request.retention.past_retention(workspace_id, tier, written, request.now)
            ):
                continue  # written to since it was found: renewed
            gone.add((int(pid), int(doc_id)))
        copies = _remove_expired(conn, sorted(gone))
    return gone, copies


def _prune_keys(conn: _Conn, before: _dt.datetime) -> int:
    with conn.transaction():
        return conn.execute(
            "DELETE FROM idempotency_keys WHERE (workspace_id, key) IN (SELECT workspace_id, key FROM idempotency_keys"
            " WHERE recorded_at < %s LIMIT %s)",
            (before, _KEYS_BATCH),
        ).rowcount


@contextmanager
def _untranslated(conn: _Conn) -> Iterator[bool]:
    """Inside the block the session's server messages are untranslated (``lc_messages`` ``C``) where the
    role may set that, so VACUUM's reports can be read (:data:`_RECENTLY_DEAD`, :data:`_CUTOFF`) whatever
    the server's language; it is reset after.

    A superuser may set ``lc_messages``, and on PostgreSQL 15 and later a role granted ``SET ON PARAMETER
    lc_messages``. A session in ``C`` or ``POSIX`` already (``ALTER ROLE ... SET lc_messages = 'C'``) is
    left as it is (such a role could not reset it). Another role's session keeps the server's language:
    its reports are read when that is English, and otherwise cannot be.

    :return: (as the block's value) whether the messages are untranslated, so a report without the
        statistics sought is not for want of English.
    """
    may_set = "current_setting('is_superuser') = 'on'"
    if conn.info.server_version >= 150000:
        may_set += " OR has_parameter_privilege('lc_messages', 'SET')"
    row = conn.execute(f"SELECT current_setting('lc_messages'), {may_set}").fetchone()
    assert row is not None
    if str(row[0]).lower() in _UNTRANSLATED:
        yield True
        return
    if not row[1]:
        yield False
        return
    try:
        conn.execute("SET lc_messages TO 'C'")
    except psycopg.errors.InsufficientPrivilege:  # the grant revoked since the query above
        yield False
        return
    try:
        yield True
    finally:
        if not conn.closed:
            with suppress(psycopg.Error):
                conn.execute("RESET lc_messages")


@contextmanager
def _notices(conn: _Conn) -> Iterator[list[str]]:
    """The server's notices on ``conn`` while the block runs (VACUUM VERBOSE's report), each its primary message
    and detail, in a list the block's caller reads after it."""
    details: list[str] = []

    def notice(diag: psycopg.errors.Diagnostic) -> None:
        details.append(f"{diag.message_primary or ''}\n{diag.message_detail or ''}")

    conn.add_notice_handler(notice)
    try:
        yield details
    finally:
        conn.remove_notice_handler(notice)


@contextmanager
def _lock_timeout(conn: _Conn, seconds: float) -> Iterator[None]:
    """The session's ``lock_timeout`` is ``seconds`` (at least 1 ms: 0 would wait for ever) inside the block."""
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{max(1, int(seconds * 1000))}",))
    try:
        yield
    finally:
        if not conn.closed:
            with suppress(psycopg.Error):
                conn.execute("RESET lock_timeout")


def _erasures_recorded(conn: _Conn) -> bool:
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM erasures)").fetchone()
    return bool(row and row[0])


def _removable_cutoff(conn: _Conn, lock_wait: float) -> int | None:
    """The transaction id below which VACUUM now removes deleted rows, from the report of a plain
    ``VACUUM (VERBOSE)`` of the small ``erasures`` table (it blocks no reader or writer: it waits, at most
    ``lock_wait`` s, only for another VACUUM of that table). The server computes it as it would for a
    shard's rewrite, leaving out what holds nothing back (a plain VACUUM elsewhere shows an xmin in
    ``pg_stat_activity`` but keeps no row alive).

    :return: ``None`` when the report names no cutoff (in English: see :func:`_untranslated`).
    :raises psycopg.errors.LockNotAvailable: another VACUUM of the table held it for ``lock_wait`` s.
    """
    with _notices(conn) as details, _lock_timeout(conn, lock_wait):
        conn.execute("VACUUM (VERBOSE) erasures")
    found = [int(m.group(1)) for d in details for m in [_CUTOFF.search(d)] if m]
    return found[0] if found else None


def _lines_shard(documents_shard: str) -> str:
    """The ``lines`` shard beside a ``documents`` shard (hash-partitioned alike): ``documents_3`` -> ``lines_3``."""
    return "lines_" + documents_shard.rsplit("_", 1)[1]


def _pending_result(removed: int, pending: list[str], where: str) -> ForgetResult:
    """An erasure whose rows are gone but whose bytes may still be in table files (P24).

    It is recorded (the ``erasures`` table) and finishes in the background retry once it can (or at the
    next forget or start).
    """
    log.warning(
        "PostgreSQL %s: erased rows are gone, but the files of %s may still hold their text (another "
        "transaction kept old row versions alive or held a lock, or VACUUM's report could not be read: then "
        "a warning before this one says what to grant); a background retry finishes the erasure once it can "
        "(or the next forget or start does)",
        where,
        ", ".join(pending),
    )
    return ForgetResult(removed=removed, pending=True)


#: The quarantine table's columns: the fields of QuarantineRecord, in its order (the table names them alike).
_QFIELDS: Final = tuple(field.name for field in attrs.fields(_QuarantineRecord))
_QCOLS: Final = ", ".join(_QFIELDS)


def _record(row: tuple[Any, ...]) -> _QuarantineRecord:
    """The record of a ``SELECT {_QCOLS}`` row, through memvault's one converter."""
    fields = dict(zip(_QFIELDS, row, strict=True))
    created = fields["created_at"]
    assert isinstance(created, _dt.datetime)
    fields["created_at"] = created.astimezone(_dt.timezone.utc)  # psycopg answers in the session's zone
    if isinstance(fields.get("expires_at"), _dt.datetime):
        fields["expires_at"] = fields["expires_at"].astimezone(_dt.timezone.utc)
    try:
        return wire.structure(fields, _QuarantineRecord, what="a row of table quarantine")
    except InvalidRequest as exc:
        raise UpstreamError(f"a row of table quarantine is not a quarantine record (edited by hand?): {exc}") from exc


def _schema_ok(name: object) -> bool:
    return isinstance(name, str) and schema.SCHEMA_NAME.fullmatch(name) is not None


def _describe(params: dict[str, Any]) -> str:
    """Where the provider connects, for messages (never the password)."""
    host = params.get("host") or params.get("hostaddr") or "(libpq default host)"
    port = params.get("port") or ""
    db = params.get("dbname") or "(default database)"
    return f"{host}{':' + str(port) if port else ''}/{db}"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _newer_message(where: str, schema_name: str, version: int) -> str:
    return (
        f"PostgreSQL {where} schema {schema_name!r} has memvault schema version {version}, newer than the "
        f"{schema.SCHEMA_VERSION} this memvault-postgres understands (a newer release wrote it): upgrade "
        "memvault-postgres, or set schema to another one"
    )


def _health_message(exc: psycopg.Error, where: str, schema_name: str) -> str:
    """A distinct triage sentence per failure (P27)."""
    text_ = _first_line(exc)
    low = str(exc).lower()
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return f"PostgreSQL {where} did not answer the health probe within {HEALTH_DEADLINE:g} s"
    if isinstance(exc, psycopg.errors.InvalidPassword) or "password authentication failed" in low:
        return f"PostgreSQL {where} refused the credentials: {text_}"
    if isinstance(exc, psycopg.errors.InvalidAuthorizationSpecification) or "authentication" in low:
        return f"PostgreSQL {where} refused the login: {text_}"
    if isinstance(exc, psycopg.errors.InvalidCatalogName) or ("database" in low and "does not exist" in low):
        return f"the PostgreSQL database at {where} does not exist: {text_}"
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return f"memvault's tables are missing from schema {schema_name!r} in PostgreSQL {where} (dropped?)"
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return f"PostgreSQL {where} is read-only (a standby, or default_transaction_read_only): {text_}"
    if "refused" in low:
        return f"PostgreSQL {where} refused the connection (is the server running?): {text_}"
    if isinstance(exc, psycopg.OperationalError):
        return f"cannot reach PostgreSQL {where}: {text_}"
    return f"PostgreSQL {where} failed the health probe: {text_}"
