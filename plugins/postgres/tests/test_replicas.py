"""Several ``memvault serve --provider postgres`` replicas on one database (scale-out).

Two service processes on different ports share one PostgreSQL schema and one
tokens file, as they would behind a load balancer. Clients are the
``http-remote`` provider.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memvault
from memvault.contract.errors import MemvaultError
from memvault_postgres.testing import TemporaryCluster

pytest.importorskip("memvault_http_remote", reason="the replica tests need memvault-http-remote (memvault serve)")
from memvault_http_remote.settings import hash_token

TOKEN = "replica-token-0123456789abcdef"
_TOKEN_RE = re.compile(r"<([ab])(\d+)-(\d+)>")


class Replica:
    """One ``memvault serve`` process; its first stdout line names its URL."""

    def __init__(self, cluster: TemporaryCluster, schema: str, tokens: Path, cwd: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        for name in ("MEMVAULT_CONFIG", "MEMVAULT_PROVIDER"):
            env.pop(name, None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from memvault.cli.main import main; main()",
                "serve",
                "--provider",
                "postgres",
                "-o",
                f"dsn={cluster.dsn()}",
                "-o",
                f"schema={schema}",
                "--port",
                "0",
                "--tokens-file",
                str(tokens),
            ],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        deadline = time.monotonic() + 60
        self.url = ""
        while time.monotonic() < deadline and not self.url:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if "listening on " in line:
                self.url = line.split("listening on ", 1)[1].split(" ", 1)[0]
        if not self.url:
            self.stop()
            raise RuntimeError("replica did not start:\n" + "\n".join(self.stderr[-30:]))

    @staticmethod
    def _pump(stream: Any, sink: Any) -> None:
        for line in stream:
            sink(line.rstrip("\n"))

    def client(self, timeout: float = 10.0) -> memvault.Vault:
        return memvault.open("http-remote", url=self.url, token=TOKEN, timeout=timeout, scanner="off")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def replicas(cluster: TemporaryCluster, schema_name: str, tmp_path: Path) -> Iterator[tuple[Replica, Replica]]:
    tokens = tmp_path / "tokens.toml"  # one file, shared by every replica
    tokens.write_text(
        f'[[tokens]]\nname = "agents"\nsha256 = "{hash_token(TOKEN)}"\nworkspaces = ["rep-*"]\n', encoding="utf-8"
    )
    first = Replica(cluster, schema_name, tokens, tmp_path)
    try:
        second = Replica(cluster, schema_name, tokens, tmp_path)
    except BaseException:
        first.stop()
        raise
    try:
        yield first, second
    finally:
        first.stop()
        second.stop()


def _append(vault: memvault.Vault, token: str, key: str) -> None:
    vault.retain(
        memvault.RetainRequest(workspace_id="rep-1", agent_id="a1", tier="daily", key=key, content=token, mode="append")
    )


def _read(vault: memvault.Vault, key: str) -> str:
    return vault.read(memvault.ReadRequest(workspace_id="rep-1", agent_id="a1", tier="daily", key=key)).content


def _check_whole(body: str, acked: set[str]) -> None:
    """Every acknowledged append exactly once, none twice, nothing but whole tokens."""
    tokens = [m.group(0) for m in _TOKEN_RE.finditer(body)]
    assert _TOKEN_RE.sub("", body) == "", "a write was torn or interleaved mid-way"
    assert len(tokens) == len(set(tokens)), "an append was duplicated"
    missing = acked - set(tokens)
    assert not missing, f"{len(missing)} acknowledged appends lost, e.g. {sorted(missing)[:3]}"


def test_eight_writers_across_two_replicas_lose_and_duplicate_nothing(replicas: tuple[Replica, Replica]) -> None:
    first, second = replicas
    clients = [first.client(), second.client()]
    acked: set[str] = set()
    lock = threading.Lock()
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def writer(w: int) -> None:
        vault = clients[w % 2]  # 4 threads on each replica
        barrier.wait(30)
        for k in range(30):
            token = f"<a{w}-{k}>"
            try:
                _append(vault, token, "2026-04-01")
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return
            with lock:
                acked.add(token)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert len(acked) == 240
    for vault in clients:
        _check_whole(_read(vault, "2026-04-01"), acked)
        assert len(_TOKEN_RE.findall(_read(vault, "2026-04-01"))) == 240
    for vault in clients:
        vault.close()


def test_a_write_acknowledged_by_one_replica_is_read_through_the_other(replicas: tuple[Replica, Replica]) -> None:
    first, second = replicas
    writer, reader = first.client(), second.client()
    try:
        for k in range(20):
            token = f"<a0-{k}>"
            _append(writer, token, "2026-04-02")
            assert _read(reader, "2026-04-02").endswith(token)
            hits = reader.recall(memvault.RecallRequest(workspace_id="rep-1", agent_id="a1", query=f"a0 {k}"))
            assert any(h.source == "daily/2026-04-02.md" for h in hits.hits)
    finally:
        writer.close()
        reader.close()


def test_sigkill_of_one_replica_mid_load_loses_no_acknowledged_write(replicas: tuple[Replica, Replica]) -> None:
    """8 writers, 4 per replica; replica 1 is killed with SIGKILL mid-load and its writers move to
    replica 2 (as a load balancer would), each failed append abandoned, never retried as-is."""
    first, second = replicas
    survivor = second.client()
    acked: set[str] = set()
    lock = threading.Lock()
    failures: list[BaseException] = []
    killed = threading.Event()

    def writer(w: int) -> None:
        vault = first.client(timeout=3.0) if w % 2 == 0 else second.client()
        try:
            for k in range(40):
                token = f"<b{w}-{k}>"
                try:
                    _append(vault, token, "2026-04-03")
                except MemvaultError:
                    if not killed.is_set() or vault is survivor:
                        raise
                    vault.close()
                    vault = second.client()  # fail over; the lost token may or may not have landed
                    continue
                with lock:
                    acked.add(token)
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
        finally:
            vault.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(acked) < 60 and time.monotonic() < deadline:
        time.sleep(0.01)
    killed.set()
    first.kill()
    for t in threads:
        t.join(120)
    assert failures == [], failures
    assert len(acked) >= 280, "the survivor did not take over the load"
    body = _read(survivor, "2026-04-03")
    _check_whole(body, acked)
    assert survivor.health().ok
    survivor.close()
