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
from typing import Final

from memvault.contract.errors import MemvaultError
from memvault_sqlite.connection import Database, is_busy

__all__ = ["BACKGROUND_BUSY_MS", "SCRUB_INTERVAL", "Scrubber"]

log = logging.getLogger("memvault_sqlite")

#: Seconds between two attempts of the background scrub of pending erasures.
SCRUB_INTERVAL: Final = 0.25
#: How long an opportunistic scrub attempt (background, after a write, at open) waits for
#: readers: short, because a waiting TRUNCATE checkpoint holds back new writers.
BACKGROUND_BUSY_MS: Final = 10


class Scrubber:
    """The scrub of recorded erasures for one :class:`~memvault_sqlite.connection.Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        db.after_fork.append(self._forked)

    def _forked(self) -> None:
        # In a forked child: the thread is gone (the next finish starts one) and the lock may be held.
        self._lock = threading.Lock()
        self._thread = None

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

    def _attempt(self, wait: float, busy_ms: int = 50) -> bool:
        with self.db.using():
            return self._attempt_inside(wait, busy_ms)

    def _attempt_inside(self, wait: float, busy_ms: int) -> bool:
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
                    with self.db.writer("forget"):
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
                if self._attempt(0.0, busy_ms=BACKGROUND_BUSY_MS):
                    return
            except (sqlite3.Error, MemvaultError) as exc:
                if self.db.swapped is not None:
                    return  # the vault refuses for good (check_file logged why)
                log.warning("sqlite database %s: background scrub failed, will retry: %s", self.db.path, exc)
