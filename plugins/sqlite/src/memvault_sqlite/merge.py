"""Keeping the search index merged: the FTS5 segments small retains leave, merged in idle time.

Every write transaction adds a small segment to its shard's FTS5 index. FTS5's own
``automerge`` merges a level once it holds four, so a shard written by many small retains
holds 12 to 18 segments, and every query visits each: a LoCoMo recall of a 1,000-line
partition written line by line is about 12 % slower than on the same lines merged
(``docs/performance.md``). :class:`Merger` merges each shard a vault wrote once the shard
has gone ``idle_merge`` seconds without a write, one bounded step at a time: FTS5's
``merge`` command, at most :data:`MERGE_PAGES` pages per step, each step in its own short
transaction in this process's writer turn and only while no write of the process holds or
waits for it, so a write that arrives waits for one step at most.

The shards merge with ``usermerge = 2``: a level holding two segments is merged into one
on the next level, which leaves at most one segment per level. Unlike a merge of the whole
index (a negative ``merge`` or ``optimize``, which on SQLite 3.40 deepen the index by a
level or two each time new writes sit below it: :data:`~memvault_sqlite.schema.FTS_MAX_LEVELS`),
this never adds levels beyond what the index's size needs. The index keeps the same
terms, only in fewer segments, so recall answers the same; the pages the merged segments
held are zeroed (``secure_delete``).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from typing import Final

from memvault.contract.errors import MemvaultError
from memvault_sqlite import schema
from memvault_sqlite.connection import Database, is_busy

__all__ = ["MERGE_MIN_SEGMENTS", "MERGE_PAGES", "Merger"]

log = logging.getLogger("memvault_sqlite")

#: Pages of merged index one step writes at most (FTS5's ``merge`` command; about 1-2 ms).
MERGE_PAGES: Final = 64
#: A shard with fewer segments is left as it is.
MERGE_MIN_SEGMENTS: Final = 4
#: How long a step waits for another process's write lock before leaving the shard for later.
_BUSY_MS: Final = 10


class Merger:
    """The idle-time merging of the FTS5 shards one vault writes.

    A shard is merged once it has gone ``idle`` seconds without a write from this vault
    (other shards may be busy meanwhile: a service whose tenants never all pause still gets
    its quiet shards merged), one step at a time, each only while no write of this process
    holds or waits for the writer turn.

    :param idle: seconds without a write to a shard before it is merged; ``0``: never.
    """

    def __init__(self, db: Database, idle: float) -> None:
        self.db = db
        self.idle = idle
        self._wake = threading.Condition()
        self._stopped = False
        #: Shards written since they were last merged: how many writes each has had, and when the last one was.
        self._shards: dict[int, tuple[int, float]] = {}
        self._thread: threading.Thread | None = None
        db.after_fork.append(self._forked)

    def _forked(self) -> None:
        # In a forked child: the thread is gone and the lock may be held by a thread that is gone too.
        self._wake = threading.Condition()
        self._shards.clear()
        self._thread = None

    def wrote(self, shard: int) -> None:
        """A write to ``shard`` committed (or will with its write group): merge it once it is idle.

        Cheap on the writer's path: the merging thread is started once and then only woken.
        """
        if self.idle <= 0 or self.db.memory:
            return
        with self._wake:
            writes = self._shards.get(shard, (0, 0.0))[0]
            self._shards[shard] = (writes + 1, time.monotonic())
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(
                    target=self._run, name=f"memvault-sqlite-merge-{self.db.path}", daemon=True
                )
                self._thread.start()
            elif writes == 0:
                self._wake.notify()

    def stop(self) -> None:
        """Stop merging (waits up to 2 s for a step in progress). Idempotent."""
        with self._wake:
            self._stopped = True
            self._wake.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    def _run(self) -> None:
        while True:
            with self._wake:
                if self._stopped:
                    return
                if not self._shards:
                    self._wake.wait()  # until a write (or stop)
                    continue
                # The shard idle longest, and how long until it has been idle long enough.
                shard, (writes, last) = min(self._shards.items(), key=lambda item: item[1][1])
                wait = last + self.idle - time.monotonic()
                if wait > 0 or not self.db.writers_idle():
                    # Written lately, or this process's writers are at work: look again a little later.
                    self._wake.wait(max(wait, min(self.idle / 4, 0.05)))
                    continue
            try:
                done = self.step(shard, busy_ms=_BUSY_MS)
            except (sqlite3.Error, MemvaultError, OSError) as exc:  # the thread must outlive any failed step
                if isinstance(exc, sqlite3.Error) and is_busy(exc):
                    # Another process writes: this shard waits for another idle spell.
                    with self._wake:
                        if self._shards.get(shard, (0, 0.0))[0] == writes:
                            self._shards[shard] = (writes, time.monotonic())
                    continue
                if self.db.swapped is not None:
                    return  # the vault refuses for good (check_file logged why)
                log.warning("sqlite database %s: merging search index shard %d failed: %s", self.db.path, shard, exc)
                done = True  # not retried until the shard is written again
            if done:
                with self._wake:
                    if self._shards.get(shard, (0, 0.0))[0] == writes:  # not written again meanwhile
                        del self._shards[shard]

    def step(self, shard: int, *, busy_ms: int) -> bool:
        """One bounded merge step of ``shard`` in its own transaction; ``True`` when nothing is left to merge.

        :param busy_ms: how long to wait for another process's write lock (then ``sqlite3.OperationalError``).
        """
        with self.db.using():
            return self._step(shard, busy_ms)

    def _step(self, shard: int, busy_ms: int) -> bool:
        if self.db.closed:
            return True
        conn = self.db.conn()
        shape = schema.fts_shape(conn, shard)
        if shape is None or shape[1] < MERGE_MIN_SEGMENTS:
            return True
        table = schema.fts_table(shard)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
        try:
            with self.db.write(conn, "merge"):
                if conn.execute(f"SELECT v FROM {table}_config WHERE k = 'usermerge'").fetchone() != (2,):
                    conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('usermerge', 2)")
                before = conn.total_changes
                conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('merge', ?)", (MERGE_PAGES,))
                worked = conn.total_changes - before >= 2  # FTS5's documented sign that the step merged
                levels = schema.fts_levels(conn, shard)
                if levels is not None and levels > schema.FTS_MAX_LEVELS:
                    schema.optimize_fts(conn, shard)  # rebuilt from `lines`: see FTS_MAX_LEVELS
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.db.timeout * 1000)}")
        return not worked
