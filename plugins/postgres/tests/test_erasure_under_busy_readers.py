"""Erasure over a real ``memvault serve`` on PostgreSQL while 8 clients keep recalling (P13, P24, P40).

The scene of ``plugins/http-remote/tests/test_erasure_over_service.py`` (which serves
sqlite), with the session's throwaway PostgreSQL behind the service: eight clients
recall a partition of 2,000 lines in a loop, by words, and once more with the
service recalling by meaning (the default embedder; the vectors in
``line_vectors``). A recall holds its shard's lock while it reads, and the
erasure's ``VACUUM FULL`` needs that shard alone. After each erasure the test looks
for the erased line through SQL (bodies, lines, vectors, quarantine) and in the
bytes of the data directory's files (outside ``pg_wal``: see
docs/operators/postgres.md). The property: an answer with ``pending`` false (or
absent) leaves none of it; a ``pending`` answer is followed by retries of the same
forget that finish the job within the deadline, and health counts the pending
erasure meanwhile. And no recall returns the line (by its words, or by a paraphrase
that shares none of them).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pg_helpers import BusyReaders

import memvault
from memvault_postgres.testing import TemporaryCluster

pytest.importorskip("memvault_http_remote", reason="the erasure-over-service tests need memvault serve")
from memvault_http_remote.settings import hash_token

WORKSPACE = "t-erasure"
READERS = 8
WORDS = [
    *("gardens", "weather", "rain", "sunshine", "tomatoes", "harvest"),
    *("river", "mountain", "coffee", "morning", "evening", "letters"),
]
QUERY = " ".join(WORDS) + " ordinary note today"
#: A line about something else than the partition's, and a question about it sharing none of its words:
#: only a recall by meaning finds the line by it.
SECRET = "Orlando injects insulin twice daily because of his diabetes"
PARAPHRASE = "which medicine does he take for blood sugar"
DEADLINE = 60.0
TOKENS = [f"erasure-token-{n:02d}-abcdefgh" for n in range(READERS + 1)]


def seed(cluster: TemporaryCluster, schema: str, embedder: str) -> None:
    """2,000 lines the readers recall, and (by meaning) their vectors, so the service starts with no backlog."""
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema, scanner="off", embedder=embedder) as vault:
        for day in range(1, 9):
            body = "".join(
                f"ordinary note {day} {i} about {WORDS[i % 12]} and {WORDS[(i * 7) % 12]} today\n" for i in range(250)
            )
            vault.retain(
                memvault.RetainRequest(
                    workspace_id=WORKSPACE,
                    agent_id="a1",
                    tier="daily",
                    key=f"2025-01-{day:02d}",
                    content=body,
                    mode="replace",
                )
            )
        if embedder != "off":
            report = vault.embed_pending(timeout=DEADLINE)
            assert report is not None
            assert report.backlog == 0


def write_config(root: Path, cluster: TemporaryCluster, schema: str, embedder: str) -> Path:
    # One token per client, so a per-token concurrency bound never turns the readers away.
    tokens = "".join(
        f'[[server.tokens]]\nname = "erasure-{n}"\nsha256 = "{hash_token(token)}"\nworkspaces = ["t-*"]\n'
        for n, token in enumerate(TOKENS)
    )
    config = root / "memvault.toml"
    config.write_text(
        f'provider = "postgres"\n[embed]\nembedder = "{embedder}"\n'
        f'[providers.postgres]\ndsn = "{cluster.dsn()}"\nschema = "{schema}"\n[server]\nport = 0\n{tokens}',
        encoding="utf-8",
    )
    return config


class Served:
    """A ``memvault serve`` subprocess; its first stdout line names its URL."""

    def __init__(self, config: Path, cwd: Path) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        # MEMVAULT_EMBEDDER would override the config's [embed] choice.
        for name in ("MEMVAULT_CONFIG", "MEMVAULT_PROVIDER", "MEMVAULT_EMBEDDER"):
            env.pop(name, None)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from memvault.cli.main import main; main()", "--config", str(config), "serve"],
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
        deadline = time.monotonic() + DEADLINE
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
            raise RuntimeError("memvault serve did not start:\n" + "\n".join(self.stderr[-30:]))

    @staticmethod
    def _pump(stream: Any, sink: Any) -> None:
        for line in stream:
            sink(line.rstrip("\n"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


class Service:
    def __init__(self, server: Served, cluster: TemporaryCluster, schema: str, embedder: str) -> None:
        self.server = server
        self.cluster = cluster
        self.schema = schema
        self.by_meaning = embedder != "off"
        self.client = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {TOKENS[-1]}"}, timeout=DEADLINE
        )

    def post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.client.post(route, json=body)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    def retain(self, content: str, *, key: str, subject: str = "") -> None:
        owner = {"workspace_id": WORKSPACE, "agent_id": "a1", "tier": "peers", "key": key}
        self.post("/v1/retain", {**owner, "content": content, "mode": "append", "data_subject_id": subject})

    def forget(self, subject: str) -> dict[str, Any]:
        return self.post("/v1/forget", {"workspace_id": WORKSPACE, "data_subject_id": subject})

    def health(self) -> dict[str, Any]:
        response = self.client.get("/v1/health")
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    def read(self, key: str) -> str:
        owner = {"workspace_id": WORKSPACE, "agent_id": "a1", "tier": "peers", "key": key}
        return str(self.post("/v1/read", owner)["content"])

    def snippets(self, query: str) -> list[str]:
        hits = self.post("/v1/recall", {"workspace_id": WORKSPACE, "agent_id": "a1", "query": query})["hits"]
        return [str(h["snippet"]) for h in hits]

    def vector_of(self, key: str) -> bytes:
        """The vector of line 1 of document ``peers/<key>.md``, once the service stored it."""
        deadline = time.monotonic() + DEADLINE
        with self.cluster.admin("memvault") as conn:
            while True:
                row = conn.execute(
                    f"SELECT v.vector FROM {self.schema}.line_vectors AS v JOIN {self.schema}.documents AS d"
                    " ON d.partition_id = v.partition_id AND d.id = v.document_id"
                    " WHERE d.label = %s AND v.line_no = 1 AND v.vector IS NOT NULL",
                    (f"peers/{key}.md",),
                ).fetchone()
                if row is not None:
                    return bytes(row[0])
                assert time.monotonic() < deadline, "the service never embedded the line"
                time.sleep(0.1)

    def residue(self, marker: str, *vectors: bytes) -> list[str]:
        """Where the erased line still is: rows (SQL) and the data directory's files (outside pg_wal)."""
        s = self.schema
        like = f"%{marker}%"
        found = []
        with self.cluster.admin("memvault") as conn:
            for what, query, params in (
                ("documents", f"SELECT count(*) FROM {s}.documents WHERE body LIKE %s", (like,)),
                ("lines", f"SELECT count(*) FROM {s}.lines WHERE text LIKE %s", (like,)),
                ("quarantine", f"SELECT count(*) FROM {s}.quarantine WHERE content LIKE %s", (like,)),
                *(("line_vectors", f"SELECT count(*) FROM {s}.line_vectors WHERE vector = %s", (v,)) for v in vectors),
            ):
                row = conn.execute(query, params).fetchone()
                if row is not None and row[0]:
                    found.append(f"{row[0]} row(s) of {what}")
            conn.execute("CHECKPOINT")  # every dirty buffer in the files
        for needle in (marker.encode(), *vectors):
            found += [f"{path}: {needle[:40]!r}" for path in self.cluster.files_containing(needle)]
        return found

    def erase(self, subject: str, marker: str, *vectors: bytes) -> tuple[dict[str, Any], int, float]:
        """Forget, then retry while the answer says pending; a complete answer leaves no residue.

        :return: the first answer, how many retries it took and how long, in seconds.
        """
        start = time.monotonic()
        answer = first = self.forget(subject)
        retries = 0
        while answer.get("pending", False):
            assert time.monotonic() < start + DEADLINE, "the pending erasure never finished"
            time.sleep(0.2)
            answer = self.forget(subject)
            retries += 1
            assert answer["removed"] == 0
        took = time.monotonic() - start
        assert self.residue(marker, *vectors) == [], "a complete erasure left the line in the store"
        return first, retries, took


class Readers(BusyReaders):
    """Eight clients recalling the partition in a loop, each with its own token."""

    def __init__(self, url: str) -> None:
        super().__init__(READERS, DEADLINE)
        self.url = url
        self.clients = [
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKENS[n]}"}, timeout=DEADLINE)
            for n in range(READERS)
        ]

    def recall_once(self, n: int) -> str | None:
        response = self.clients[n].post(
            "/v1/recall", json={"workspace_id": WORKSPACE, "agent_id": "a1", "query": QUERY}
        )
        return None if response.status_code == 200 else f"{response.status_code} {response.text[:200]}"

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            for client in self.clients:
                client.close()


@pytest.fixture(scope="module", params=["off", "minilm"], ids=["by-words", "by-meaning"])
def service(
    request: pytest.FixtureRequest, cluster: TemporaryCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    embedder = str(request.param)
    if embedder != "off":
        pytest.importorskip("memvault_embed_minilm", reason="the default embedder is not installed")
    root = tmp_path_factory.mktemp(f"erasure-postgres-{embedder}")
    schema = f"t_{uuid.uuid4().hex[:16]}"
    seed(cluster, schema, embedder)
    server = Served(write_config(root, cluster, schema, embedder), root)
    try:
        yield Service(server, cluster, schema, embedder)
    finally:
        server.stop()


def test_subject_erasure_under_busy_readers_leaves_no_row_nor_byte_of_the_line(service: Service) -> None:
    with Readers(service.server.url) as readers:
        for n in range(2):
            marker = f"zqxbusyreaders{n}marker"
            service.retain(f"{marker}: {SECRET}\n", key=f"busy-{n}", subject=f"busy-subject-{n}")
            vectors = [service.vector_of(f"busy-{n}")] if service.by_meaning else []
            if service.by_meaning:
                assert any(marker in s for s in service.snippets(PARAPHRASE)), "precondition: found by meaning"
            before = sum(readers.done)
            first, retries, took = service.erase(f"busy-subject-{n}", marker, *vectors)
            print(
                f"round {n}: {first}, {retries} retries, {took:.2f} s, {sum(readers.done) - before} recalls meanwhile"
            )
            assert first["removed"] == 1
            assert service.read(f"busy-{n}") == ""
            assert not [s for q in (marker, PARAPHRASE) for s in service.snippets(q) if marker in s]


def test_pending_erasure_shows_in_health_and_a_retry_finishes_it(service: Service) -> None:
    """A transaction older than the erasure (a report, a ``pg_dump``) still sees the rows: the erasure is
    pending, health counts it, and a retry once that transaction ended finishes it."""
    marker = "zqxheldreadermarker"
    service.retain(f"{marker}: {SECRET}\n", key="held", subject="held-subject")
    vectors = [service.vector_of("held")] if service.by_meaning else []
    holder = service.cluster.admin("memvault")
    try:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pg_class").fetchone()  # a snapshot, no lock on the store's tables
        with Readers(service.server.url):
            assert service.forget("held-subject") == {"removed": 1, "pending": True}
            deadline = time.monotonic() + DEADLINE
            while service.health().get("pending_erasures", 0) < 1:
                assert time.monotonic() < deadline, "health never reported the pending erasure"
                time.sleep(0.2)
            assert service.forget("held-subject") == {"removed": 0, "pending": True}
            assert service.read("held") == ""
            assert not [s for q in (marker, PARAPHRASE) for s in service.snippets(q) if marker in s]
            holder.execute("ROLLBACK")
            _first, retries, took = service.erase("held-subject", marker, *vectors)
            print(f"released: {retries} retries, {took:.2f} s")
    finally:
        holder.close()
    deadline = time.monotonic() + DEADLINE
    while service.health().get("pending_erasures", 0) != 0:
        assert time.monotonic() < deadline, "health kept reporting a finished erasure"
        time.sleep(0.2)


def test_document_of_two_subjects_is_erased_for_the_first_under_busy_readers(service: Service) -> None:
    marker = "zqxtwosubjectsmarker"
    service.retain(f"{marker}: {SECRET}\n", key="shared", subject="user-43")
    service.retain("second words\n", key="shared", subject="user-44")
    vectors = [service.vector_of("shared")] if service.by_meaning else []
    with Readers(service.server.url):
        first, _retries, _took = service.erase("user-43", marker, *vectors)
        assert first["removed"] == 1
        assert service.read("shared") == ""
        assert not [s for q in (marker, PARAPHRASE) for s in service.snippets(q) if marker in s]
        # the other subject's tag went with the document: a new document at the label is untouched
        service.retain("fresh and untagged\n", key="shared")
        assert service.forget("user-44") == {"removed": 0}
        assert service.read("shared") == "fresh and untagged\n"
    assert service.residue(marker, *vectors) == []
    assert "pending_erasures" not in service.health()
