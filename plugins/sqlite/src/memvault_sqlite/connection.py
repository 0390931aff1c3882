"""The sqlite provider's seam to SQLite: connections, busy retries, error translation, health.

:class:`Database` owns everything that talks to the file as a file: where it
is (checked with ``stat`` only), the per-thread connections and their pragmas,
the one writer path of this process (:meth:`Database.write`), retries while
another process holds the write lock, the health probe, and the translation
of every ``sqlite3`` and ``OSError`` exception into :mod:`memvault.errors`
types (:meth:`Database.translating`, and :func:`translated` for the
provider's hook methods): the core never sees a raw ``sqlite3.Error``
(contract P28).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
import os
import random
import sqlite3
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, cast

from memvault.contract.errors import InvalidRequest, MemvaultError, UpstreamError
from memvault.contract.models import HealthStatus
from memvault_sqlite import schema

__all__ = ["MEMORY", "Database", "is_busy", "newer_message", "translated"]

log = logging.getLogger("memvault_sqlite")

_T = TypeVar("_T")
_F = TypeVar("_F", bound=Callable[..., Any])
SYNCHRONOUS: Final = ("off", "normal", "full", "extra")
MEMORY: Final = ":memory:"
#: How long health's fresh connection waits for a lock (its answer is due within 200 ms, P26).
_HEALTH_BUSY_MS: Final = 100
#: At most this many writes share one group commit (one transaction, one fsync).
MAX_BATCH: Final = 64


def is_busy(exc: sqlite3.Error) -> bool:
    msg = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in msg or "busy" in msg)


def _is_not_a_database(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc).lower()


def _is_corrupt(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.DatabaseError) and "malformed" in str(exc).lower()


def _is_full(exc: sqlite3.Error) -> bool:
    """SQLITE_FULL: the disk (or the file system's quota) has no room for the write."""
    return getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL or "disk is full" in str(exc).lower()


_SQLITE_FULL: Final = 13  # sqlite3.SQLITE_FULL from Python 3.11 on


#: Below this much free space where the database lives, health says the store cannot take writes: a
#: commit appends pages to the write-ahead log, and a full disk fails it (P25, P27).
_MIN_FREE_BYTES: Final = 64 * 1024


def free_bytes(folder: Path) -> int:
    """Bytes this process may still write under ``folder`` (root may use the blocks kept for it);
    unbounded where the system cannot tell (no ``statvfs``)."""
    if not hasattr(os, "statvfs"):
        return 1 << 62
    st = os.statvfs(folder)
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return blocks * st.f_frsize


def newer_message(path: str, version: int) -> str:
    return (
        f"sqlite database {path} has schema version {version}, newer than the {schema.SCHEMA_VERSION} this "
        "memvault-sqlite understands (a newer release wrote it): upgrade memvault-sqlite, or open another file"
    )


class WriterQueue:
    """The one writer path of this process to one database file: a first-come, first-served lock.

    SQLite lets one connection write at a time; others wait in its busy handler,
    which *sleeps* (1, 2, 5, ... 100 ms) and retries, so under many writer
    threads a few unlucky ones sleep for seconds while others barge in (p99
    hundreds of times the median). Threads of this process queue here instead,
    in arrival order, each woken the moment the previous writer commits; only
    other processes still meet SQLite's busy handler. (``threading.Lock``
    alone would let a thread that just released it take it again first.)
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._waiters: deque[threading.Lock] = deque()
        self._held = False
        self._since = 0.0  # time.monotonic() when the present holder got the lock

    def acquire(self, timeout: float) -> bool:
        with self._mutex:
            if not self._held:
                self._held = True
                self._since = time.monotonic()
                return True
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
        if turn.acquire(timeout=timeout):
            return True  # the previous holder handed the lock over
        with self._mutex:
            try:
                self._waiters.remove(turn)
            except ValueError:
                return True  # handed over between the timeout and now: ours
            return False

    def idle(self) -> bool:
        """Nobody holds or waits for the lock (a hint: it may change at once)."""
        return not self._held

    def held_for(self) -> float:
        """How long the present holder has held the lock, in seconds (0 when nobody holds it)."""
        with self._mutex:
            return time.monotonic() - self._since if self._held else 0.0

    def release(self) -> None:
        with self._mutex:
            if self._waiters:
                self._since = time.monotonic()
                self._waiters.popleft().release()  # hand over: stays held
            else:
                self._held = False


#: One queue per database file in this process, shared by every vault open on it.
_QUEUES: weakref.WeakValueDictionary[str, WriterQueue] = weakref.WeakValueDictionary()
_QUEUES_LOCK = threading.Lock()


def _queue_for(key: str) -> WriterQueue:
    with _QUEUES_LOCK:
        queue = _QUEUES.get(key)
        if queue is None:
            queue = _QUEUES[key] = WriterQueue()
        return queue


# -- fork --------------------------------------------------------------------------------------
#
# SQLite keeps the locks a process holds on a file in process-wide state, which a fork copies.
# A child whose parent had the file open at the fork believes it holds the parent's shared lock
# without holding it, so the parent closing its last connection checkpoints and deletes the WAL
# under the child's feet: the child's later commits go to a deleted file and are lost (measured:
# 80-110 of 300 acknowledged retains), even on connections the child opened itself. And the
# writer turn, the group-commit queue and the background threads' locks may be held at the fork
# by threads the child does not have. So, before a fork, this process closes every connection
# it is not using (each thread opens a new one on its next call); in the child, every lock,
# queue and thread is new, and a file whose connection was inside a transaction at the fork
# refuses writes with an error that says why.


class _Depth:
    """How deep one thread is inside the gate."""

    __slots__ = ("__weakref__", "value")

    def __init__(self) -> None:
        self.value = 0


class _ForkGate:
    """Every use of a connection runs inside the gate (reentrant per thread); a fork waits until no
    thread is inside, so the connections it closes are ones nobody is using, and holds new entries
    back until it is done. (Closing a connection another thread is using crashes the interpreter.)

    No lock on the way in or out: a thread raises its own depth, then looks at ``forking``; the fork
    sets ``forking``, then reads every depth. Under the GIL one of them sees the other.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._depths: weakref.WeakSet[_Depth] = weakref.WeakSet()
        self._register_lock = threading.Lock()
        self._resumed = threading.Event()
        self._resumed.set()
        self.forking = False

    def _depth(self) -> _Depth:
        try:
            depth: _Depth = self._local.depth
        except AttributeError:
            depth = self._local.depth = _Depth()
            with self._register_lock:
                self._depths.add(depth)
        return depth

    def serving(self) -> None:
        """The calling thread works only for threads inside the gate (the group commit's writer): it is
        not waited for (they are), and never held back (they wait for it)."""
        self._local.depth = _Depth()  # not registered: never counted
        self._local.depth.value = 1  # never at the outermost level: never held back

    def __enter__(self) -> None:
        depth = self._depth()
        depth.value += 1
        while self.forking and depth.value == 1:  # a fork is waiting for the threads inside: wait for it
            depth.value = 0
            self._resumed.wait()
            depth.value = 1

    def __exit__(self, *exc: object) -> None:
        self._local.depth.value -= 1

    def close(self, timeout: float) -> bool:
        """Hold new entries back and wait up to ``timeout`` s for the threads inside; whether none is."""
        self._resumed.clear()
        self.forking = True
        mine = self._depth()  # the forking thread may itself be inside (a fork from a hook): not waited for
        deadline = time.monotonic() + timeout
        while True:
            with self._register_lock:
                others = [d for d in self._depths if d is not mine and d.value]
            if not others:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.001)

    def open(self) -> None:
        self.forking = False
        self._resumed.set()


_GATE = _ForkGate()
#: How long a fork waits for this process's calls into SQLite to finish (then it forks anyway).
_FORK_WAIT: Final = 5.0

#: Every open database of this process.
_OPEN: weakref.WeakSet[Database] = weakref.WeakSet()
#: Files of the parent's databases that had a connection in a transaction at the fork (child only).
_TAINTED: set[str] = set()
#: Connections a child inherited in a transaction: never used, kept so they are not closed.
_INHERITED: list[sqlite3.Connection] = []


def _before_fork() -> None:
    databases = [db for db in list(_OPEN) if not db.memory]
    if databases:
        quiet = _GATE.close(_FORK_WAIT)
        for db in databases:
            db._close_idle_for_fork(quiet)


def _after_fork_in_parent() -> None:
    _GATE.open()


def _after_fork_in_child() -> None:
    global _QUEUES_LOCK, _GATE
    _QUEUES_LOCK = threading.Lock()
    _QUEUES.clear()
    _GATE = _ForkGate()
    for db in list(_OPEN):
        db._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


#: The files SQLite keeps beside a database in WAL mode, found by name.
_COMPANIONS: Final = ("-wal", "-shm")
#: Connections that could not be closed without SQLite touching the path (see _close_without_checkpoint).
_NEVER_CLOSED: list[sqlite3.Connection] = []
_SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE: Final = 1006
#: A SQLite at least this new skips the checkpoint-on-close of a file renamed or deleted since it was opened.
_SKIPS_CHECKPOINT_WHEN_MOVED: Final = (3, 30, 0)


def _during(verb: str) -> str:
    return f" during {verb}" if verb else ""


def _close_without_checkpoint(conn: sqlite3.Connection) -> None:
    """Close ``conn`` (whose file the path no longer names) so that SQLite neither checkpoints nor
    deletes the ``-wal``/``-shm`` by name.

    Python 3.12 and later turn SQLite's checkpoint-on-close off for the connection
    (``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE``): it then closes its descriptors only. Earlier
    Pythons cannot; there SQLite's own check does it: a closing connection whose file has
    been renamed or deleted since it was opened skips the checkpoint and both deletes
    (``databaseIsUnmoved`` in its pager, for every SQLite these Pythons ship with). Should
    an older SQLite be linked, the connection is kept open until the process ends instead
    (never deallocated, so never closed; the descriptors go with the process).
    """
    setconfig = getattr(conn, "setconfig", None)
    if setconfig is not None:
        try:
            setconfig(getattr(sqlite3, "SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE", _SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE), True)
        except sqlite3.Error:
            pass
        else:
            with suppress(sqlite3.Error):
                conn.close()
            return
    if sqlite3.sqlite_version_info >= _SKIPS_CHECKPOINT_WHEN_MOVED:
        with suppress(sqlite3.Error):
            conn.close()
        return
    _NEVER_CLOSED.append(conn)
    with suppress(AttributeError, OSError):  # CPython: a reference no interpreter shutdown releases
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))


class _FileSwapped(UpstreamError):
    """The path names another file than the one the vault opened (an ``UpstreamError``: callers see that)."""

    def __init__(self, message: str, verb: str) -> None:
        super().__init__(message)
        self.verb = verb


class _Write:
    """One caller's write waiting for its group commit."""

    __slots__ = ("done", "error", "result", "verb", "work")

    def __init__(self, work: Callable[[sqlite3.Connection], Any], verb: str) -> None:
        self.work = work
        self.verb = verb
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class _Group:
    """A write group open on one thread (:meth:`Database.group`): its connection, and a fatal error."""

    __slots__ = ("broken", "conn", "depth")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.depth = 1
        #: Set when SQLite rolled the whole transaction back under a write: the group cannot commit.
        self.broken: BaseException | None = None


class _HasDatabase(Protocol):
    db: Database


def translated(verb: str) -> Callable[[_F], _F]:
    """Decorate a method of an object with a ``db`` (:class:`Database`): no raw storage error escapes it.

    ``sqlite3.Error`` and ``OSError`` become :class:`~memvault.errors.UpstreamError`
    naming ``verb`` and the cause, chained; memvault errors pass through unchanged.
    The signature is kept (pluggy reads the hook's argument names through it).
    """

    def decorate(method: _F) -> _F:
        @functools.wraps(method)
        def wrapper(self: _HasDatabase, *args: Any, **kwargs: Any) -> Any:
            with self.db.translating(verb):
                return method(self, *args, **kwargs)

        return cast(_F, wrapper)

    return decorate


class Database:
    """One SQLite database file (or private in-memory database) and this process's connections to it.

    :param path: the file, or ``:memory:``.
    :param timeout: seconds a write waits for another process's write lock.
    :param synchronous: SQLite's ``synchronous`` level for every connection.
    """

    def __init__(self, path: str, *, timeout: float, synchronous: str) -> None:
        if synchronous.lower() not in SYNCHRONOUS:
            raise InvalidRequest(
                f"synchronous {synchronous!r} is not a SQLite synchronous level: use one of {', '.join(SYNCHRONOUS)}",
                field="synchronous",
            )
        if not 0 < timeout < math.inf:  # nan fails it too
            raise InvalidRequest("timeout must be a positive, finite number of seconds", field="timeout")
        self.timeout = float(timeout)
        self.synchronous = synchronous.lower()
        self.memory = path == MEMORY
        if self.memory:
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
        self._memory_lock = threading.RLock() if self.memory else None
        self.closed = False
        #: (st_dev, st_ino) of the file once opened: every use of a connection checks that the path still
        #: names it (:meth:`check_file`), and health reports a file replaced under the vault.
        self.identity: tuple[int, int] | None = None
        #: (st_dev, st_ino) of the ``-wal`` and ``-shm`` beside the file while this process has it open.
        self._companions: dict[str, tuple[int, int]] = {}
        #: Why the path no longer names the file the vault opened (it was replaced, moved or deleted):
        #: set once, then every call refuses and close() never lets SQLite touch the path.
        self.swapped: str | None = None
        self._writers = _queue_for(self._uri)
        # Group commit: writes queued for the writer thread, which commits them in batches.
        self._pending: deque[_Write] = deque()
        self._pending_cond = threading.Condition(threading.Lock())
        self._committer: threading.Thread | None = None
        #: Bumped when this process drops its connections (a fork): a thread's older one is not used again.
        self._generation = 0
        #: Called in a forked child, after the database itself is reset (the provider's background work).
        self.after_fork: list[Callable[[], None]] = []
        _OPEN.add(self)

    # -- connections ---------------------------------------------------------

    def connect(self, busy_ms: int | None = None) -> sqlite3.Connection:
        """A new connection with the provider's pragmas (the caller closes it).

        :raises sqlite3.Error: when the file fails its first read; call inside :meth:`translating`.
        """
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
        except sqlite3.Error:
            # The file is read here for the first time: the caller's translating() names its verb.
            conn.close()
            raise
        return conn

    def conn(self) -> sqlite3.Connection:
        """The calling thread's connection, opened on first use (and again after a fork)."""
        if self.closed:
            raise UpstreamError(f"the sqlite provider for {self.path} is closed: open a new vault")
        return self._thread_conn()

    def _thread_conn(self) -> sqlite3.Connection:
        local = self._local
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is None or local.generation != self._generation:
            if self.path in _TAINTED:
                raise UpstreamError(
                    f"sqlite database {self.path}: this process was forked while another thread of its parent "
                    "was inside a transaction on it, so SQLite's locks here are not trustworthy and writing could "
                    "lose data: open the vault in the child without forking from inside a vault call, or use "
                    "multiprocessing's 'spawn' or 'forkserver' start method"
                )
            self.check_file()
            conn = self.connect()
            try:
                # The first read opens the -wal and -shm (by name): checked again after it, so every
                # connection kept holds the file and the log of one moment.
                conn.execute("PRAGMA schema_version").fetchone()
                self.check_file()
            except MemvaultError:
                _close_without_checkpoint(conn)
                raise
            except BaseException:
                conn.close()
                raise
            local.conn = conn
            local.generation = self._generation
            with self._conn_lock:
                first = not self._connections
                dead = [c for t, c in self._connections if not t.is_alive()]
                self._connections = [(t, c) for t, c in self._connections if t.is_alive()]
                self._connections.append((threading.current_thread(), conn))
            for old in dead:
                with suppress(sqlite3.Error):
                    old.close()
            if first and self.identity is not None:
                # The process had no connection open (after a fork's close): SQLite may have deleted
                # the -wal and -shm, and this connection's first read made them afresh.
                self._remember_companions()
        else:
            self.check_file()
        return conn

    def remember_identity(self) -> None:
        """Note which file the path names now, and its ``-wal`` and ``-shm`` (``stat``, never ``open``)."""
        if not self.memory:
            st = os.stat(self.path)
            self.identity = (st.st_dev, st.st_ino)
            self._remember_companions()

    def _remember_companions(self) -> None:
        found = {}
        for suffix in _COMPANIONS:
            with suppress(OSError):
                st = os.stat(self.path + suffix)
                found[suffix] = (st.st_dev, st.st_ino)
        self._companions = found

    def check_file(self, verb: str = "") -> None:
        """Refuse (``UpstreamError``) when the path no longer names the file this vault opened.

        Called whenever a thread takes its connection (every verb, the committer, the background
        merge and scrub), and before a write group's ``COMMIT``: one ``stat``.
        A connection keeps the file it opened, while its ``-wal`` and ``-shm`` are found by name;
        after a restored backup is moved over the path, a connection opened now would read the old
        file's log as the new file's, and the old connections' commits and checkpoints would reach
        the ``-wal``/``-shm`` the new file is opened with. Once noticed, the vault refuses for good
        and removes the old file's own ``-wal`` and ``-shm`` from beside the new one (see
        :meth:`_let_go_of_companions`).
        """
        if self.identity is None:
            return  # in memory, or still opening
        if self.swapped is None:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                what = "deleted (or moved away)"
            except OSError as exc:
                raise UpstreamError(
                    f"sqlite database {self.path} cannot be inspected{_during(verb)}: {exc}; fix the permissions "
                    "of its directory, then retry"
                ) from exc
            else:
                if (st.st_dev, st.st_ino) == self.identity:
                    return
                what = "replaced by another file"
            with self._conn_lock:
                first = self.swapped is None
                if first:
                    self.swapped = what
            if first:
                log.error("sqlite database %s was %s while a vault had it open", self.path, what)
                self._let_go_of_companions()
        raise _FileSwapped(self.swap_message(verb), verb)

    def swap_message(self, verb: str = "") -> str:
        return (
            f"sqlite database {self.path} was {self.swapped} while this vault had it open (a restored backup "
            f"moved over it?), so the vault refuses{' ' + verb if verb else ''}: its connections still hold the "
            "old file, and nothing may reach the new one through them. Close the vault and open it again "
            "(restart the service) to use the file the path names now"
        )

    def _let_go_of_companions(self) -> None:
        """Remove the old file's ``-wal`` and ``-shm`` from the path, where the new file would take them for
        its own (a new vault would replay the old file's log into it); never another file's.

        The connections keep both open: :meth:`close` checkpoints what they hold into the old file.
        """
        for suffix, identity in self._companions.items():
            name = self.path + suffix
            with suppress(OSError):
                st = os.stat(name)
                if (st.st_dev, st.st_ino) == identity:
                    os.unlink(name)

    def using(self) -> AbstractContextManager[None]:
        """Enter around a use of this database's connections outside :meth:`translating` (background
        work): a fork waits until it is over."""
        return _GATE

    def _close_idle_for_fork(self, quiet: bool) -> None:
        """Before a fork: close this process's connections to the file that no thread is using.

        :param quiet: no thread is inside a call (the gate): every connection may be closed.
            Otherwise only the forking thread's own and those of threads that have ended.
        """
        me = threading.current_thread()
        with suppress(MemvaultError):
            self.check_file("fork")
        with self._conn_lock:
            kept = []
            for thread, conn in self._connections:
                if (quiet or thread is me or not thread.is_alive()) and not conn.in_transaction:
                    if self.swapped is not None:
                        _close_without_checkpoint(conn)
                        continue
                    with suppress(sqlite3.Error):
                        conn.close()
                else:
                    kept.append((thread, conn))
            self._connections = kept
            self._generation += 1

    def _forked(self) -> None:
        """In a forked child: new locks, queues and threads; none of the parent's connections is used."""
        self._conn_lock = threading.Lock()
        if not self.memory:
            if self._connections:
                _TAINTED.add(self.path)
            _INHERITED.extend(conn for _thread, conn in self._connections)
            self._connections = []
        self._generation += 1
        self._memory_lock = threading.RLock() if self.memory else None
        self._writers = _queue_for(self._uri)
        self._pending = deque()  # the parent's callers' writes: theirs to commit, not the child's
        self._pending_cond = threading.Condition(threading.Lock())
        self._committer = None
        for reset in self.after_fork:
            reset()

    def close(self) -> None:
        """Finish the queued writes, then close every connection opened through :meth:`conn`. Idempotent."""
        with self._pending_cond:
            self.closed = True
            self._pending_cond.notify_all()
            committer = self._committer
        if committer is not None and committer is not threading.current_thread():
            committer.join(self.timeout + 5.0)
        if self.swapped is None:
            with suppress(MemvaultError):
                self.check_file("close")
        with self._conn_lock:
            conns, self._connections = self._connections, []
        if self.swapped is not None:
            self._close_after_swap([conn for _thread, conn in conns])
            return
        for _thread, conn in conns:
            with suppress(sqlite3.Error):
                conn.close()

    def _close_after_swap(self, conns: list[sqlite3.Connection]) -> None:
        """Close connections whose file the path no longer names, without SQLite touching the path.

        The last connection to a file in WAL mode checkpoints its log into the file it holds (the
        old one: harmless), then deletes the ``-wal`` and ``-shm`` *by name*: by now those may be
        the restored backup's own log, or the files a new vault on the new file writes. So the
        log is checkpointed into the old file here, explicitly (a file moved aside keeps every
        acknowledged write), and each connection closes with SQLite's checkpoint-on-close turned
        off (see :func:`_close_without_checkpoint`).
        """
        self._let_go_of_companions()
        idle = [conn for conn in conns if not conn.in_transaction]
        if idle:
            with _GATE, suppress(sqlite3.Error):
                idle[0].execute(f"PRAGMA busy_timeout = {_HEALTH_BUSY_MS}")
                idle[0].execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        for conn in conns:
            _close_without_checkpoint(conn)

    # -- transactions, retries, errors ----------------------------------------

    @contextmanager
    def writer(self, verb: str = "write") -> Iterator[None]:
        """Hold this process's writer turn for the file (FIFO; see :class:`WriterQueue`)."""
        if getattr(self._local, "group", None) is not None:
            # This thread's write group holds the turn: waiting for it here would wait forever.
            raise UpstreamError(
                f"sqlite database {self.path}: {verb} cannot run inside a write group (Vault.retain_many "
                "runs only retains in it): call it before or after retain_many"
            )
        if not self._writers.acquire(self.timeout):
            raise UpstreamError(
                f"sqlite database {self.path} stayed locked for more than {self.timeout:g} s during {verb} "
                "(this process's writers queue for it; the writer ahead may be waiting for another process): "
                "retry later, or raise the provider's timeout setting"
            )
        try:
            yield
        finally:
            self._writers.release()

    @contextmanager
    def write(self, conn: sqlite3.Connection, verb: str = "write") -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction on ``conn`` in this process's writer turn.

        Rolled back on any failure. The turn is held from ``BEGIN`` to ``COMMIT`` only, so a
        retry after "database is locked" (another process) waits outside it.
        """
        with self.writer(verb):
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                conn.execute("COMMIT")
            except BaseException:
                # Also after a failed COMMIT: never leave the thread's connection mid-transaction.
                if conn.in_transaction:
                    conn.rollback()
                raise

    def writers_idle(self) -> bool:
        """Whether no write of this process holds or waits for the writer turn (a hint: it may change at once)."""
        return not self._pending and self._writers.idle()

    # -- group commit ----------------------------------------------------------

    def in_group(self) -> bool:
        """Whether the calling thread has a write group open on this database."""
        return getattr(self._local, "group", None) is not None

    @contextmanager
    def group(self, verb: str = "retain") -> Iterator[None]:
        """One transaction for every :meth:`commit` this thread makes inside (contract P34).

        Holds the process's writer turn and SQLite's write lock from entry to exit; each write
        runs inside its own ``SAVEPOINT`` (a write that raises is rolled back alone), and a
        clean exit commits them all at once. Re-entering on the same thread joins the open group.

        :raises UpstreamError: when the commit fails (nothing of the group is stored).
        """
        open_group: _Group | None = getattr(self._local, "group", None)
        if open_group is not None:
            open_group.depth += 1
            try:
                yield
            finally:
                open_group.depth -= 1
            return
        conn = self.conn()
        # An in-memory database's writes hold its lock for the whole transaction (see retry);
        # taken before the writer turn, in the same order as theirs.
        with self._memory_lock or nullcontext(), self.writer(verb):
            self.retry(lambda: conn.execute("BEGIN IMMEDIATE"), verb)
            group = _Group(conn)
            self._local.group = group
            try:
                yield
                if group.broken is not None:
                    raise self._as_memvault(group.broken, verb)
                self.check_file(verb)
                with self.translating(verb):
                    conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise
            finally:
                self._local.group = None

    def _in_group(self, group: _Group, work: Callable[[sqlite3.Connection], _T], verb: str) -> _T:
        conn = group.conn
        if group.broken is not None:
            raise UpstreamError(
                f"sqlite database {self.path}: an earlier write of this group failed its transaction "
                f"during {verb}; nothing of the group is stored: retry"
            )
        self.check_file(verb)
        with self.translating(verb):
            conn.execute("SAVEPOINT memvault_write")
        try:
            value = work(conn)
        except Exception as exc:
            if not conn.in_transaction:
                group.broken = exc  # SQLite rolled the whole transaction back: the group fails
            else:
                with self.translating(verb):
                    conn.execute("ROLLBACK TO memvault_write")
                    conn.execute("RELEASE memvault_write")
            error = self._as_memvault(exc, verb)
            if error is exc:
                raise
            raise error from exc
        with self.translating(verb):
            conn.execute("RELEASE memvault_write")
        return value

    def commit(self, work: Callable[[sqlite3.Connection], _T], verb: str) -> _T:
        """Run ``work(conn)`` in a write transaction and return once it is committed (durable).

        Concurrent callers share transactions: one writer thread takes every queued write,
        runs each inside its own ``SAVEPOINT`` (a write that raises is rolled back alone and
        its caller gets the error; the others commit), commits once, and only then answers
        each caller. A failed ``COMMIT`` fails every write of its batch. ``work`` must not
        commit, and may run on another thread than the caller's.
        """

        group: _Group | None = getattr(self._local, "group", None)
        if group is not None:
            return self._in_group(group, work, verb)

        def inline() -> _T:
            conn = self.conn()
            with self.write(conn, verb):
                return work(conn)

        # In-memory databases (one shared cache, serialised by retry's lock) never batch. Nor does
        # a write that finds no other writer of this process: it commits on the caller's thread,
        # sparing a lone writer two thread switches (if another writer slips in first, it simply
        # waits its turn like any other).
        if self.memory or (not self._pending and self._writers.idle()):
            return self.retry(inline, verb)
        write = _Write(work, verb)
        with self._pending_cond:
            if self.closed:
                raise UpstreamError(f"the sqlite provider for {self.path} is closed: open a new vault")
            self._pending.append(write)
            if self._committer is None or not self._committer.is_alive():
                self._committer = threading.Thread(
                    target=self._commit_loop, name=f"memvault-sqlite-commit-{self.path}", daemon=True
                )
                self._committer.start()
            self._pending_cond.notify()
        write.done.wait()
        if write.error is not None:
            raise write.error
        return cast(_T, write.result)

    def _commit_loop(self) -> None:
        # Every write this thread commits is a caller's, who waits inside the fork gate for it.
        _GATE.serving()
        while True:
            with self._pending_cond:
                while not self._pending and not self.closed:
                    self._pending_cond.wait()
                if not self._pending:
                    return  # closed and drained
                batch = [self._pending.popleft() for _ in range(min(MAX_BATCH, len(self._pending)))]
            try:
                self._commit_batch(batch)
            except BaseException as exc:  # noqa: BLE001 - every caller of the batch gets the error
                # Each caller gets its own exception, naming its own operation, SQLite's cause chained.
                cause = exc.__cause__ if isinstance(exc.__cause__, (sqlite3.Error, OSError)) else exc
                for write in batch:
                    write.error = self._as_memvault(cause, write.verb)
            finally:
                for write in batch:
                    write.done.set()

    def _commit_batch(self, batch: list[_Write]) -> None:
        # Its own connection, also while close() waits for the queue to drain.
        conn = self._thread_conn()
        outcomes: list[tuple[bool, Any]] = []

        verb = batch[0].verb if len({w.verb for w in batch}) == 1 else "write"

        def transaction() -> None:
            outcomes.clear()
            with self.write(conn, verb):
                for write in batch:
                    conn.execute("SAVEPOINT memvault_write")
                    try:
                        value = write.work(conn)
                    except Exception as exc:
                        if not conn.in_transaction:
                            raise  # SQLite rolled the whole transaction back: the batch fails
                        conn.execute("ROLLBACK TO memvault_write")
                        conn.execute("RELEASE memvault_write")
                        outcomes.append((False, exc))
                    else:
                        conn.execute("RELEASE memvault_write")
                        outcomes.append((True, value))

        self.retry(transaction, verb)
        # Committed: answer each caller.
        for write, (ok, value) in zip(batch, outcomes, strict=True):
            if ok:
                write.result = value
            else:
                write.error = self._as_memvault(value, write.verb)

    def _as_memvault(self, exc: BaseException, verb: str) -> BaseException:
        if isinstance(exc, sqlite3.Error):
            error: BaseException = self.error(verb, exc)
        elif isinstance(exc, OSError):
            error = UpstreamError(f"sqlite database {self.path} failed during {verb}: {exc}")
        else:
            return exc
        error.__cause__ = exc
        return error

    def retry(self, action: Callable[[], _T], verb: str) -> _T:
        """Run ``action``; retry "database is locked" up to ``timeout`` seconds, then UpstreamError."""
        with self.translating(verb):
            deadline = time.monotonic() + self.timeout
            delay = 0.005
            while True:
                try:
                    if self._memory_lock is not None:
                        with self._memory_lock:
                            return action()
                    return action()
                except sqlite3.Error as exc:
                    if is_busy(exc) and time.monotonic() < deadline:
                        time.sleep(delay * (0.5 + random.random()))
                        delay = min(delay * 2, 0.2)
                        continue
                    raise

    @contextmanager
    def translating(self, verb: str) -> Iterator[None]:
        """Turn a ``sqlite3.Error`` or ``OSError`` raised inside into a memvault error (cause chained).

        Every call into SQLite runs inside: a fork waits for it (see :class:`_ForkGate`).
        """
        with _GATE:
            try:
                yield
            except _FileSwapped as exc:
                if exc.verb:
                    raise
                raise _FileSwapped(self.swap_message(verb), verb) from None  # now naming the operation
            except sqlite3.Error as exc:
                raise self.error(verb, exc) from exc
            except OSError as exc:
                raise UpstreamError(f"sqlite database {self.path} failed during {verb}: {exc}") from exc

    def error(self, verb: str, exc: sqlite3.Error) -> MemvaultError:
        """SQLite's verdict as a typed error that names the operation and says what to do.

        At ``open`` a file that is not a database is the caller's path (``InvalidRequest``);
        afterwards it is the storage changing under the vault (``UpstreamError``).
        """
        path = self.path
        if is_busy(exc):
            return UpstreamError(
                f"sqlite database {path} stayed locked by another writer for more than {self.timeout:g} s "
                f"during {verb}: retry later, or raise the provider's timeout setting"
            )
        if _is_not_a_database(exc):
            if verb == "open":
                return InvalidRequest(
                    f"{path} is not a SQLite database (SQLite says: {exc}): point path at a memvault database "
                    "or a new file",
                    field="path",
                )
            return UpstreamError(
                f"sqlite database {path} is not a SQLite database any more (SQLite says: {exc}) during {verb}: "
                "restore the file from a backup, or close the vault and reopen it on a memvault database"
            )
        if _is_corrupt(exc):
            return UpstreamError(
                f"the sqlite database {path} is corrupt (SQLite says: {exc}) during {verb}: restore it from a "
                "backup, or recover it with the sqlite3 shell's .recover command"
            )
        if _is_full(exc):
            return UpstreamError(
                f"the disk holding the sqlite database {path} is full (SQLite says: {exc}) during {verb}: nothing "
                "of this operation was stored; free space on that file system (the database needs room for its "
                "write-ahead log too), then retry"
            )
        return UpstreamError(f"sqlite database {path} failed during {verb}: {type(exc).__name__}: {exc}")

    # -- health (P25-P27) -------------------------------------------------------

    def health(self) -> HealthStatus:
        """Check the file with ``stat``, then a fresh connection: a query and a rolled-back write probe."""
        if self.memory:
            try:
                self.retry(lambda: self.conn().execute("SELECT count(*) FROM documents").fetchone(), "health")
            except MemvaultError as exc:
                return HealthStatus(ok=False, message=str(exc))
            return HealthStatus(ok=True)
        path = Path(self.path)
        if not path.parent.is_dir():
            return HealthStatus(ok=False, message=f"the directory {path.parent} of the sqlite database is missing")
        if not os.access(path.parent, os.W_OK | os.X_OK):
            return HealthStatus(ok=False, message=f"the directory {path.parent} of the sqlite database is not writable")
        try:
            self.check_file("health")  # replaced, moved or deleted since open: every verb refuses
        except MemvaultError as exc:
            return HealthStatus(ok=False, message=str(exc))
        try:
            os.stat(path)
        except FileNotFoundError:
            return HealthStatus(ok=False, message=f"the sqlite database file {path} is missing (deleted after open?)")
        except OSError as exc:
            return HealthStatus(ok=False, message=f"the sqlite database {path} cannot be inspected: {exc}")
        # The probe below writes nothing that reaches the disk (it rolls back): look at the room left.
        with suppress(OSError):
            free = free_bytes(path.parent)
            if free < _MIN_FREE_BYTES:
                return HealthStatus(
                    ok=False,
                    message=f"the disk holding the sqlite database {path} is full ({free} bytes free): writes fail "
                    "until space is freed on that file system",
                )
        try:
            conn = self.connect(busy_ms=_HEALTH_BUSY_MS)
        except MemvaultError as exc:
            return HealthStatus(ok=False, message=f"the sqlite database cannot be opened: {exc}")
        except sqlite3.Error as exc:
            return HealthStatus(ok=False, message=_probe_failure(path, exc))
        try:
            status = self._probe(conn, path)
        except sqlite3.Error as exc:
            status = HealthStatus(ok=False, message=_probe_failure(path, exc))
        try:
            self.check_file("health")  # the probe's connection may have met the new file: close it quietly
        except MemvaultError as exc:
            _close_without_checkpoint(conn)
            return HealthStatus(ok=False, message=str(exc))
        conn.close()
        return status

    def _probe(self, conn: sqlite3.Connection, path: Path) -> HealthStatus:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > schema.SCHEMA_VERSION:
            return HealthStatus(ok=False, message=newer_message(str(path), version))
        conn.execute("SELECT count(*) FROM partitions").fetchone()
        pending = int(conn.execute("SELECT count(*) FROM pending_erasures").fetchone()[0])
        # Other connections' commits change data_version: a write lock that stays busy while
        # they commit is a busy database, not a stuck one (P25: busy is healthy).
        version_before = conn.execute("PRAGMA data_version").fetchone()[0]
        # The probe queues with this process's writers (never pushing them into SQLite's
        # sleeping busy handler), but only for as long as a probe may take.
        if not self._writers.acquire(_HEALTH_BUSY_MS / 1000):
            if conn.execute("PRAGMA data_version").fetchone()[0] != version_before:
                return HealthStatus(ok=True, pending_erasures=pending)
            # A write of this process holds the queue and has not committed within the wait (an fsync on a
            # loaded disk, a thread the scheduler put aside): busy, unless it has held it longer than any
            # writer waits for its turn, which makes the other writers fail.
            if self._writers.held_for() < self.timeout:
                return HealthStatus(ok=True, pending_erasures=pending)
            return HealthStatus(ok=False, message=f"the sqlite database {path} is locked by a long write")
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                if is_busy(exc) and conn.execute("PRAGMA data_version").fetchone()[0] != version_before:
                    return HealthStatus(ok=True, pending_erasures=pending)
                raise
            try:
                conn.execute("INSERT INTO probe DEFAULT VALUES")
            finally:
                conn.execute("ROLLBACK")
        finally:
            self._writers.release()
        return HealthStatus(ok=True, pending_erasures=pending)


def _probe_failure(path: Path, exc: sqlite3.Error) -> str:
    if is_busy(exc):
        return f"the sqlite database {path} is locked by a long write"
    if "readonly" in str(exc).lower():
        return f"the sqlite database {path} is read-only: {exc}"
    if _is_not_a_database(exc):
        return f"{path} is not a SQLite database any more (SQLite says: {exc})"
    if _is_corrupt(exc):
        return f"the sqlite database {path} is corrupt (SQLite says: {exc})"
    return f"the sqlite database {path} failed a probe query: {exc}"


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
    # SQLite itself says "file is not a database" on the first statement; Database.error
    # translates that into InvalidRequest at open.
