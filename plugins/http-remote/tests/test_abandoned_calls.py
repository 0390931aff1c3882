"""A provider call the request gave up on (504) keeps its slots until it returns (a real `memvault serve`).

A worker thread cannot be stopped: past ``request_timeout`` the caller gets 504
but the provider call runs on. Before, the request's gate slots and its
thread-limiter token went back at the 504, so the next request started one more
thread: with a store that hangs (here another process holds SQLite's write lock),
the service's threads grew without bound, past ``max_concurrent``. Now the calls
running, abandoned ones included, stay within ``max_concurrent`` and each
caller's own bound, and new requests get the gate's typed 503 meanwhile.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpremote_support import ServerProcess, memvault_command

from memvault_http_remote.settings import hash_token

A, B = "tenant-a-token-abandon", "tenant-b-token-abandon"
MAX_CONCURRENT = 3
MAX_PER_TOKEN = 2
TIMEOUT = 0.5


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    db = tmp_path / "abandon.db"
    tokens = "".join(
        f'[[server.tokens]]\nname = "{name}"\nsha256 = "{hash_token(secret)}"\nworkspaces = ["{name}"]\n'
        for name, secret in (("a", A), ("b", B))
    )
    (tmp_path / "memvault.toml").write_text(
        # The threads counted are the request path's: no background embedder (recall by meaning) beside it.
        f'provider = "sqlite"\n[embed]\nembedder = "off"\n[providers.sqlite]\npath = "{db}"\n'
        f"[server]\nport = 0\nrequest_timeout = {TIMEOUT}\nmax_concurrent = {MAX_CONCURRENT}\n"
        f"max_per_token = {MAX_PER_TOKEN}\n{tokens}",
        encoding="utf-8",
    )
    proc = ServerProcess(memvault_command("--config", str(tmp_path / "memvault.toml"), "serve"), tmp_path)
    yield proc, db
    proc.stop()


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def _retain(workspace: str, content: str) -> dict[str, Any]:
    return {"workspace_id": workspace, "agent_id": "a1", "tier": "AGENT", "mode": "append", "content": content}


def _post(url: str, token: str, path: str, body: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=10, headers={"Authorization": f"Bearer {token}"}) as client:
        return client.post(path, json=body)


def _busy(response: httpx.Response, setting: str) -> None:
    """The gate's typed 503, naming ``setting`` and the calls that still hold the slots."""
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1"
    error = response.json()["error"]
    assert error["type"] == "UpstreamError"
    assert f"server.{setting}" in error["message"]
    assert "provider calls still running" in error["message"], error["message"]


def _warm(url: str, token: str, workspace: str) -> None:
    """One stored retain per tenant before the test begins. The very first write creates the store's
    schema, which on a loaded machine can take longer than the test's 0.5 s request timeout: a 504
    there is the machine's, not the behaviour under test, so it is tried again (a bounded number of times)."""
    for _ in range(20):
        answer = _post(url, token, "/v1/retain", _retain(workspace, "warm\n"))
        if answer.status_code == 200:
            return
        assert answer.status_code == 504, answer.text
        time.sleep(0.5)
    pytest.fail(f"the warm-up retain of {workspace!r} timed out 20 times")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="counts the server's threads in /proc")
def test_calls_past_the_timeout_keep_their_slots_so_threads_stay_bounded(served: tuple[ServerProcess, Path]) -> None:
    server, db = served
    for token, workspace in ((A, "a"), (B, "b")):
        _warm(server.url, token, workspace)
    at_rest = _threads(server.proc.pid)
    locker = sqlite3.connect(db, isolation_level=None, timeout=30)
    locker.execute("BEGIN IMMEDIATE")  # another process holds the write lock: every retain hangs
    try:
        # Tenant a: two retains time out, their calls keep waiting for the lock, and keep a's two slots.
        with ThreadPoolExecutor(2) as pool:
            timed_out = list(
                pool.map(lambda i: _post(server.url, A, "/v1/retain", _retain("a", f"late {i}\n")), range(2))
            )
        assert [r.status_code for r in timed_out] == [504, 504]
        assert {r.json()["error"]["type"] for r in timed_out} == {"UpstreamTimeout"}
        _busy(
            _post(server.url, A, "/v1/recall", {"workspace_id": "a", "agent_id": "a1", "query": "x"}), "max_per_token"
        )
        # Another tenant still has the service's third slot: reads do not wait for the write lock.
        recall = _post(server.url, B, "/v1/recall", {"workspace_id": "b", "agent_id": "a1", "query": "warm"})
        assert recall.status_code == 200, recall.text
        assert _post(server.url, B, "/v1/retain", _retain("b", "late b\n")).status_code == 504
        # Three abandoned calls hold all three slots: every request now gets the 503 at once, and no
        # request starts a thread.
        with ThreadPoolExecutor(8) as pool:
            burst = list(pool.map(lambda i: _post(server.url, B, "/v1/retain", _retain("b", f"{i}\n")), range(16)))
        for response in burst:
            _busy(response, "max_concurrent")
        assert _threads(server.proc.pid) <= at_rest + MAX_CONCURRENT
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    # The lock gone, the abandoned calls return (their writes land, as documented) and give their slots back.
    deadline = time.monotonic() + 10
    while (answer := _post(server.url, A, "/v1/retain", _retain("a", "after\n"))).status_code == 503:
        assert time.monotonic() < deadline, "the slots of the abandoned calls never came back"
        time.sleep(0.1)
    assert answer.status_code == 200, answer.text
    read = _post(server.url, A, "/v1/read", {"workspace_id": "a", "agent_id": "a1", "tier": "AGENT"}).json()
    assert "late 0" in read["content"]
    assert "late 1" in read["content"]
    logged = "\n".join(server.stderr_lines)
    assert logged.count("after its request gave up on it (it was answered 504): it succeeded") >= 3, logged[-2000:]


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="counts the server's threads in /proc")
def test_the_thread_count_does_not_grow_with_requests_that_time_out(served: tuple[ServerProcess, Path]) -> None:
    """Retains against a held write lock, four callers at a time for 2 s: 504s then 503s, and the
    server's threads never exceed those at rest plus ``max_concurrent`` (before: one more per 504)."""
    server, db = served
    assert _post(server.url, A, "/v1/retain", _retain("a", "warm\n")).status_code == 200
    at_rest = _threads(server.proc.pid)
    locker = sqlite3.connect(db, isolation_level=None, timeout=30)
    locker.execute("BEGIN IMMEDIATE")
    peak = at_rest
    statuses: dict[int, int] = {}
    counting = threading.Lock()
    try:
        stop = time.monotonic() + 2

        def hammer(caller: int) -> None:
            token, workspace = (A, "a") if caller % 2 else (B, "b")
            with httpx.Client(base_url=server.url, timeout=10, headers={"Authorization": f"Bearer {token}"}) as c:
                while time.monotonic() < stop:
                    status = c.post("/v1/retain", json=_retain(workspace, f"{caller}\n")).status_code
                    with counting:
                        statuses[status] = statuses.get(status, 0) + 1
                    time.sleep(0.02)

        with ThreadPoolExecutor(4) as pool:
            running = [pool.submit(hammer, caller) for caller in range(4)]
            while not all(f.done() for f in running):
                peak = max(peak, _threads(server.proc.pid))
                time.sleep(0.05)
            for future in running:
                future.result()
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert peak <= at_rest + MAX_CONCURRENT, f"{peak} threads, {at_rest} at rest; answers {statuses}"
    assert set(statuses) <= {503, 504}, json.dumps(statuses)
    assert statuses.get(504, 0) <= MAX_CONCURRENT, statuses  # then the stuck calls hold every slot
