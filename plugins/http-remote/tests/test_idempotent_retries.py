"""A retain whose answer is lost after the service committed it is retried, and stored exactly once (P44).

Between the http-remote client and real ``memvault serve`` processes sits a TCP proxy
on 127.0.0.1 that forwards each request and, for the first retain it carries, reads
the service's whole answer (so the write is committed) and then closes the client's
connection without sending any of it: the caller's connection dropped after the
commit. The client retries with the same idempotency key; the service answers the
repeat with the first write's result. Across two replicas on one PostgreSQL the
retry goes to the other replica, which finds the key the first one recorded.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from httpremote_support import PARITY_TOKEN, ServerProcess, memvault_command, write_config

import memvault

WORKSPACE = "parity-retry"
ENTRY = "<paid invoice 1047>\n"


def _read_message(sock: socket.socket, pending: bytearray) -> bytes | None:
    """One HTTP/1.1 message (head and Content-Length body) from ``sock``; ``None`` at EOF."""
    while b"\r\n\r\n" not in pending:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        pending += chunk
    head_end = pending.index(b"\r\n\r\n") + 4
    length = 0
    for line in bytes(pending[:head_end]).split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(pending) < head_end + length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        pending += chunk
    message = bytes(pending[: head_end + length])
    del pending[: head_end + length]
    return message


class DroppingProxy:
    """Forwards HTTP/1.1 requests; the first ``drops`` retains are committed upstream, their answers dropped.

    The n-th retain goes to ``upstreams[n]`` (the last one for the rest); every other request to the first.
    """

    def __init__(self, upstreams: list[str], drops: int = 1) -> None:
        self.upstreams = [urlsplit(u) for u in upstreams]
        self.drops = drops
        self.retains = 0
        self.dropped_at: list[float] = []
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        pending = bytearray()
        conn.settimeout(30)
        with conn:
            while True:
                request = _read_message(conn, pending)
                if request is None:
                    return
                is_retain = request.startswith((b"POST /v1/retain ", b"POST /v1/retain/batch "))
                with self.lock:
                    index = self.retains if is_retain else 0
                    self.retains += is_retain
                    drop = is_retain and index < self.drops
                upstream = self.upstreams[min(index, len(self.upstreams) - 1)]
                with socket.create_connection((upstream.hostname, upstream.port), timeout=30) as up:
                    up.sendall(request)
                    answer = _read_message(up, bytearray())
                if drop or answer is None:
                    self.dropped_at.append(time.monotonic())
                    conn.shutdown(socket.SHUT_RDWR)  # committed upstream; the caller never hears of it
                    return
                conn.sendall(answer)

    def close(self) -> None:
        self.stopped = True
        self.sock.close()


def _append(vault: memvault.Vault, key: str = "") -> memvault.RetainResult:
    return vault.retain(
        memvault.RetainRequest(
            workspace_id=WORKSPACE,
            agent_id="a1",
            tier="daily",
            key="2026-05-01",
            content=ENTRY,
            mode="append",
            idempotency_key=key,
        )
    )


def _read(vault: memvault.Vault) -> str:
    return vault.read(
        memvault.ReadRequest(workspace_id=WORKSPACE, agent_id="a1", tier="daily", key="2026-05-01")
    ).content


def _served_config(root: Path, provider: str, settings: str) -> Path:
    """The test servers' config for ``provider`` (words only, as ``write_config`` writes it: no model to load),
    its scanner on."""
    config = write_config(root, provider)
    text = config.read_text(encoding="utf-8")
    config.write_text(f"{text}[providers.{provider}]\n{settings}", encoding="utf-8")
    return config


@pytest.fixture
def local_disk_server(tmp_path: Path) -> Iterator[ServerProcess]:
    config = _served_config(tmp_path, "local-disk", f'root = "{tmp_path / "memory"}"\n')
    server = ServerProcess(memvault_command("--config", str(config), "serve"), tmp_path)
    yield server
    server.stop()


@pytest.mark.parametrize("key", ["", "caller-key-1"], ids=["generated-key", "callers-key"])
def test_an_append_whose_answer_was_lost_is_stored_exactly_once(local_disk_server: ServerProcess, key: str) -> None:
    proxy = DroppingProxy([local_disk_server.url])
    try:
        with memvault.open("http-remote", url=proxy.url, token=PARITY_TOKEN, scanner="off", timeout=5.0) as vault:
            start = time.monotonic()
            result = _append(vault, key)  # returns normally: the retry got the recorded result
            recovered = time.monotonic() - proxy.dropped_at[0]
            assert time.monotonic() - start < 5.0
            assert proxy.retains == 2  # the dropped attempt and one retry
            assert result.bytes == len(ENTRY.encode())
            assert _read(vault) == ENTRY  # once, not twice
        print(f"retries: {proxy.retains - 1}, recovered {recovered * 1000:.0f} ms after the drop")
    finally:
        proxy.close()


def test_a_batch_whose_answer_was_lost_stores_each_item_exactly_once(local_disk_server: ServerProcess) -> None:
    proxy = DroppingProxy([local_disk_server.url])
    entries = [f"<entry {n}>\n" for n in range(3)]
    try:
        with memvault.open("http-remote", url=proxy.url, token=PARITY_TOKEN, scanner="off", timeout=5.0) as vault:
            results = vault.retain_many(
                [
                    memvault.RetainRequest(
                        workspace_id=WORKSPACE, agent_id="a1", tier="daily", key="2026-05-01", content=e, mode="append"
                    )
                    for e in entries
                ]
            )
            assert proxy.retains == 2  # the batch whose answer was dropped, and its retry
            assert [r.bytes for r in results] == [len("".join(entries[: n + 1])) for n in range(3)]
            assert _read(vault) == "".join(entries)
    finally:
        proxy.close()


def test_a_conflicting_reuse_of_a_key_is_a_409_idempotency_conflict(local_disk_server: ServerProcess) -> None:
    with memvault.open("http-remote", url=local_disk_server.url, token=PARITY_TOKEN, scanner="off") as vault:
        _append(vault, "k-reused")
        with pytest.raises(memvault.IdempotencyConflict) as info:
            vault.retain(
                memvault.RetainRequest(
                    workspace_id=WORKSPACE, agent_id="a1", tier="pins", content="other\n", mode="append",
                    idempotency_key="k-reused",
                )
            )  # fmt: skip
        assert info.value.key == "k-reused"
        assert _read(vault) == ENTRY


# -- two replicas on one PostgreSQL -------------------------------------------------------------


@pytest.fixture
def postgres_replicas(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    pytest.importorskip("memvault_postgres", reason="the replica test needs memvault-postgres")
    from memvault_postgres.testing import TemporaryCluster

    with TemporaryCluster() as cluster:
        config = _served_config(tmp_path, "postgres", f'dsn = "{cluster.dsn()}"\nschema = "retries"\n')
        first = ServerProcess(memvault_command("--config", str(config), "serve"), tmp_path, startup=60)
        try:
            second = ServerProcess(memvault_command("--config", str(config), "serve"), tmp_path, startup=60)
        except BaseException:
            first.stop()
            raise
        try:
            yield first, second
        finally:
            first.stop()
            second.stop()


def test_a_retry_that_reaches_another_replica_stores_the_append_exactly_once(
    postgres_replicas: tuple[ServerProcess, ServerProcess],
) -> None:
    first, second = postgres_replicas
    proxy = DroppingProxy([first.url, second.url])  # the first attempt to replica 1, the retry to replica 2
    try:
        with memvault.open("http-remote", url=proxy.url, token=PARITY_TOKEN, scanner="off", timeout=5.0) as vault:
            result = _append(vault)
            recovered = time.monotonic() - proxy.dropped_at[0]
            assert proxy.retains == 2
            assert result.bytes == len(ENTRY.encode())
            assert _read(vault) == ENTRY
        with memvault.open("http-remote", url=second.url, token=PARITY_TOKEN, scanner="off") as direct:
            assert _read(direct) == ENTRY
        print(f"retries: {proxy.retains - 1}, recovered on replica 2 {recovered * 1000:.0f} ms after the drop")
    finally:
        proxy.close()
