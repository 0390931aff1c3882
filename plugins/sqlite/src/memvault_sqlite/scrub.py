"""Finishing erasures: scrub the erased text's bytes out of the write-ahead log (contract P24).

A forget deletes the rows and records a ``pending_erasures`` row in the same
transaction; :class:`Scrubber` then checkpoints and truncates the WAL and drops
the records, at once when readers allow it, else from a background thread
every :data:`SCRUB_INTERVAL` seconds (and after the next write or forget, and
at the next open) until it succeeds or the provider closes.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Final

from memvault.contract.errors import MemvaultError
from memvault_sqlite.connection import Database, is_busy

__all__ = ["BACKGROUND_BUSY_MS", "READER_HOLD", "SCRUB_INTERVAL", "ReaderGate", "Scrubber"]

log = logging.getLogger("memvault_sqlite")

#: Seconds between two attempts of the background scrub of pending erasures.
SCRUB_INTERVAL: Final = 0.25
#: How long an opportunistic scrub attempt (background, after a write, at open) waits for
#: readers: short, because a waiting TRUNCATE checkpoint holds back new writers.
BACKGROUND_BUSY_MS: Final = 10
#: Seconds the background scrub holds this process's new recalls at the door while the ones in
#: progress finish, so the checkpoint finds a moment with no reader (recalls that overlap without
#: a gap, as busy readers' by meaning do, never leave one); a recall waits at most this long.
READER_HOLD: Final = 0.25


class ReaderGate:
    """This process's recalls in progress, and the scrub's brief hold on new ones (contract P24)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._holding = False

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Around a read transaction: waits (at most :data:`READER_HOLD` s) while a scrub holds the door."""
        with self._cond:
            self._cond.wait_for(lambda: not self._holding, timeout=READER_HOLD)
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    @contextmanager
    def held(self, wait: float) -> Iterator[bool]:
        """Hold new readers back and wait up to ``wait`` s for those in progress to finish.

        :return: (as the context value) whether none is in progress any more.
        """
        with self._cond:
            self._holding = True
            drained = self._cond.wait_for(lambda: self._active == 0, timeout=wait)
        try:
            yield drained
        finally:
            with self._cond:
                self._holding = False
                self._cond.notify_all()


class Scrubber:
    """The scrub of recorded erasures for one :class:`~memvault_sqlite.connection.Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: This process's recalls, which the background scrub holds back briefly (see :data:`READER_HOLD`).
        self.readers = ReaderGate()
        db.after_fork.append(self._forked)

    def _forked(self) -> None:
        # In a forked child: the thread is gone (the next finish starts one) and the lock may be held;
        # so may the gate's, and the parent's readers are not the child's.
        self._lock = threading.Lock()
        self._thread = None
        self.readers = ReaderGate()

    def stop(self) -> None:
        """Stop the background attempts (waits up to 2 s for a running one). Idempotent."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    def finish(self, *, wait: float, busy_ms: int = 50) -> bool:
        """Scrub the bytes of every recorded erasure: checkpoint and truncate the WAL, then drop the records.

        :return: ``True`` when nothing is pending any more; otherwise a background
            thread keeps trying until it succeeds or the provider is closed.
        """
        if self.db.memory or self.db.closed:
            return not self.db.closed
        try:
            done = self._attempt(wait, busy_ms)
        except (sqlite3.Error, MemvaultError) as exc:
            log.warning("sqlite database %s: scrub of pending erasures failed, will retry: %s", self.db.path, exc)
            done = False
        if not done and self.db.swapped is None:  # a swapped file refuses every attempt: no retries
            self._start()
        return done

    def _attempt(self, wait: float, busy_ms: int = 50, hold: bool = False) -> bool:
        """One attempt; with ``hold``, this process's new recalls wait while those in progress finish."""
        with self.db.using():
            return self._attempt_inside(wait, busy_ms, hold)

    def _attempt_inside(self, wait: float, busy_ms: int, hold: bool) -> bool:
        # The calling thread's own connection (its schema is loaded already), outside any
        # transaction. A TRUNCATE checkpoint holds back new writers while it waits for
        # readers, so every attempt waits only briefly (busy_ms) and retries sleep in between.
        conn = self.db.conn()
        conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        try:
            deadline = time.monotonic() + wait
            while True:
                newest = conn.execute("SELECT max(id) FROM pending_erasures").fetchone()[0]
                if newest is None:
                    return True
                try:
                    # In this process's writer turn: our writers queue behind the checkpoint and
                    # the delete instead of meeting them in SQLite's sleeping busy handler.
                    # Recalls are held only around the checkpoint, once the writer turn is ours (a long
                    # write ahead of it must not hold them) and only while an erasure is pending.
                    with self.db.writer("forget"), self.readers.held(READER_HOLD) if hold else nullcontext(True):
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
                                conn.execute(f"PRAGMA synchronous = {self.db.synchronous}")
                            return True
                except sqlite3.Error as exc:
                    if not is_busy(exc):
                        raise
                if time.monotonic() >= deadline or self._stop.is_set():
                    return False
                time.sleep(0.02)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.db.timeout * 1000)}")

    def _start(self) -> None:
        with self._lock:
            if self._stop.is_set() or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(
                target=self._until_done, name=f"memvault-sqlite-scrub-{self.db.path}", daemon=True
            )
            self._thread.start()

    def _until_done(self) -> None:
        while not self._stop.wait(SCRUB_INTERVAL):
            try:
                # The readers of other processes are not held: the checkpoint waits briefly for them.
                if self._attempt(0.0, busy_ms=BACKGROUND_BUSY_MS, hold=True):
                    return
            except (sqlite3.Error, MemvaultError) as exc:
                if self.db.swapped is not None:
                    return  # the vault refuses for good (check_file logged why)
                log.warning("sqlite database %s: background scrub failed, will retry: %s", self.db.path, exc)
