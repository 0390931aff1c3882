"""Small helpers shared by the postgres provider's tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

import memvault
from memvault_postgres.testing import TemporaryCluster


def put(
    vault: memvault.Vault,
    content: str,
    *,
    ws: str = "w1",
    tier: str = "AGENT",
    subject: str = "",
    key: str = "",
    mode: str = "append",
) -> memvault.RetainResult:
    return vault.retain(
        memvault.RetainRequest(
            workspace_id=ws, agent_id="a1", tier=tier, key=key, content=content, mode=mode, data_subject_id=subject
        )
    )


def body(vault: memvault.Vault, *, ws: str = "w1", tier: str = "AGENT", key: str = "") -> str:
    return vault.read(memvault.ReadRequest(workspace_id=ws, agent_id="a1", tier=tier, key=key)).content


def recall(vault: memvault.Vault, query: str, *, ws: str = "w1") -> list[memvault.RecallSnippet]:
    return vault.recall(memvault.RecallRequest(workspace_id=ws, agent_id="a1", query=query)).hits


def erase(vault: memvault.Vault, subject: str, *, ws: str = "w1") -> int:
    return vault.forget(memvault.ForgetRequest(workspace_id=ws, data_subject_id=subject)).removed


# -- erasure tests: read the store as an administrator, not through the vault ------------------------------


@contextmanager
def old_snapshot(cluster: TemporaryCluster) -> Iterator[psycopg.Connection[Any]]:
    """A transaction that holds a snapshot (a report, a ``pg_dump``) and no lock on the store's tables."""
    holder = cluster.admin("memvault")
    try:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pg_class").fetchone()
        yield holder
    finally:
        holder.close()


def one(cluster: TemporaryCluster, query: str, *params: Any) -> Any:
    """The first column of the first row ``query`` returns."""
    with cluster.admin("memvault") as conn:
        row = conn.execute(query, params or None).fetchone()
    assert row is not None
    return row[0]


def recorded(cluster: TemporaryCluster, schema_name: str) -> int:
    """How many erasures the store has recorded as pending."""
    return int(one(cluster, f"SELECT count(*) FROM {schema_name}.erasures"))


def until_erasures_finished(cluster: TemporaryCluster, schema_name: str, deadline: float = 15.0) -> float:
    """Seconds until no erasure is recorded any more."""
    start = time.monotonic()
    while recorded(cluster, schema_name):
        assert time.monotonic() < start + deadline, "the pending erasure never finished by itself"
        time.sleep(0.02)
    return time.monotonic() - start


def no_trace(cluster: TemporaryCluster, schema_name: str, secret: str) -> None:
    """No row holds the text, and after a checkpoint no data file outside pg_wal holds a byte of it."""
    like = f"%{secret}%"
    assert one(cluster, f"SELECT count(*) FROM {schema_name}.documents WHERE body LIKE %s", like) == 0
    assert one(cluster, f"SELECT count(*) FROM {schema_name}.lines WHERE text LIKE %s", like) == 0
    with cluster.admin("memvault") as conn:
        conn.execute("CHECKPOINT")
    assert cluster.files_containing(secret.encode()) == []


class BusyReaders:
    """``count`` threads recalling in a loop (:meth:`recall_once`) while a test erases: entered once every one has
    finished a recall (all are busy), left after they stop; any failure fails the test."""

    def __init__(self, count: int, deadline: float = 15.0) -> None:
        self.deadline = deadline
        self.stop = threading.Event()
        self.done = [0] * count
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(count)]

    def recall_once(self, n: int) -> str | None:
        """One recall by reader ``n``: ``None``, or what went wrong."""
        raise NotImplementedError

    def _run(self, n: int) -> None:
        while not self.stop.is_set():
            failure = self.recall_once(n)
            if failure is not None:
                self.failures.append(failure)
                return
            self.done[n] += 1

    def __enter__(self) -> BusyReaders:
        for thread in self.threads:
            thread.start()
        deadline = time.monotonic() + self.deadline
        while min(self.done) == 0 and time.monotonic() < deadline and not self.failures:
            time.sleep(0.02)  # every reader has finished one recall: all of them are busy now
        assert not self.failures, self.failures
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(self.deadline)
        assert not self.failures, self.failures
