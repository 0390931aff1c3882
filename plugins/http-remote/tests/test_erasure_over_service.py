"""Erasure over a real ``memvault serve`` while 8 long recalls keep read transactions open (P13, P24).

The service runs sqlite on 127.0.0.1; eight clients recall a large partition
in a loop, so the write-ahead log always has readers. After each erasure the
test searches the raw bytes of the database, ``-wal`` and ``-shm`` files (read
from this process, which never opens the database through SQLite) for the
erased text. The property: an answer with ``pending`` false (or absent) means
the text is gone from every file at that moment; a ``pending`` answer is
followed by retries of the same forget that finish the job, and health counts
the pending erasure meanwhile.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from busy_readers import Readers
from httpremote_support import ServerProcess, memvault_command

import memvault
from memvault_http_remote.settings import hash_token

WORKSPACE = "t-erasure"
READERS = 8
WORDS = [
    *("gardens", "weather", "rain", "sunshine", "tomatoes", "harvest"),
    *("river", "mountain", "coffee", "morning", "evening", "letters"),
]
QUERY = " ".join(WORDS) + " ordinary note today"
DEADLINE = 60.0
TOKENS = [f"erasure-token-{n:02d}-abcdefgh" for n in range(READERS + 1)]


def seed(db_path: Path) -> None:
    """A partition large enough that one recall holds its read transaction for a good fraction of a second."""
    with memvault.open("sqlite", path=str(db_path), scanner="off") as vault:
        for day in range(1, 41):
            body = "".join(
                f"ordinary note {day} {i} about {WORDS[i % 12]} and {WORDS[(i * 7) % 12]} today\n" for i in range(500)
            )
            key = f"2025-{(day - 1) // 28 + 1:02d}-{(day - 1) % 28 + 1:02d}"
            vault.retain(
                memvault.RetainRequest(
                    workspace_id=WORKSPACE, agent_id="a1", tier="daily", key=key, content=body, mode="replace"
                )
            )


def write_config(root: Path, db_path: Path, embedder: str = "off") -> Path:
    # One token per client, so a per-token concurrency bound never turns the readers away.
    tokens = "".join(
        f'[[server.tokens]]\nname = "erasure-{n}"\nsha256 = "{hash_token(token)}"\nworkspaces = ["t-*"]\n'
        for n, token in enumerate(TOKENS)
    )
    config = root / "memvault.toml"
    config.write_text(
        f'provider = "sqlite"\n[embed]\nembedder = "{embedder}"\n[providers.sqlite]\npath = "{db_path}"\n'
        f"scrub_wait = 0.0\n[server]\nport = 0\n{tokens}",
        encoding="utf-8",
    )
    return config


def raw_bytes(db_path: Path) -> bytes:
    out = b""
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{db_path}{suffix}")
        if path.exists():
            out += path.read_bytes()
    return out


class Service:
    def __init__(self, server: ServerProcess, db_path: Path) -> None:
        self.server = server
        self.db_path = db_path
        self.client = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {TOKENS[-1]}"}, timeout=DEADLINE
        )

    def post(self, route: str, body: dict[str, Any]) -> httpx.Response:
        return self.client.post(route, json=body)

    def retain(self, content: str, *, key: str, subject: str = "") -> None:
        body = {
            "workspace_id": WORKSPACE,
            "agent_id": "a1",
            "tier": "peers",
            "key": key,
            "content": content,
            "mode": "append",
            "data_subject_id": subject,
        }
        response = self.post("/v1/retain", body)
        assert response.status_code == 200, response.text

    def forget(self, subject: str) -> dict[str, Any]:
        response = self.post("/v1/forget", {"workspace_id": WORKSPACE, "data_subject_id": subject})
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    def health(self) -> dict[str, Any]:
        response = self.client.get("/v1/health")
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    def read(self, key: str) -> str:
        response = self.post("/v1/read", {"workspace_id": WORKSPACE, "agent_id": "a1", "tier": "peers", "key": key})
        assert response.status_code == 200, response.text
        return str(response.json()["content"])

    def recall_hits(self, query: str) -> list[dict[str, Any]]:
        response = self.post("/v1/recall", {"workspace_id": WORKSPACE, "agent_id": "a1", "query": query})
        assert response.status_code == 200, response.text
        hits: list[dict[str, Any]] = response.json()["hits"]
        return hits

    def erase_until_complete(self, subject: str, marker: bytes) -> tuple[dict[str, Any], int]:
        """Forget, then retry while the answer says pending; every complete answer must leave no residue."""
        first = self.forget(subject)
        answer, retries = first, 0
        deadline = time.monotonic() + DEADLINE
        while answer.get("pending", False):
            assert time.monotonic() < deadline, "the pending erasure never finished"
            time.sleep(0.2)
            answer = self.forget(subject)
            retries += 1
            assert answer["removed"] == 0
        assert marker not in raw_bytes(self.db_path), "a complete erasure left its text on disk"
        return first, retries


def readers(url: str) -> Readers:
    """Eight clients recalling the partition in a loop, each with its own token."""
    return Readers(url, TOKENS[:READERS], WORKSPACE, QUERY, DEADLINE)


HOLDER = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM documents").fetchone()
    print("holding", flush=True)
    sys.stdin.readline()
    conn.execute("COMMIT")
    conn.close()
    """
)


@pytest.fixture(scope="module", params=["off", "minilm"], ids=["by-words", "by-meaning"])
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The service recalling by words, and by meaning with the default embedder (installed in the env that
    runs this file): a recall by meaning holds its read transaction while it reads the partition's vectors,
    and eight such readers overlapping never left the scrub a moment with no reader (the erasure stayed
    pending past the deadline) until the scrub held new recalls back briefly."""
    embedder = str(request.param)
    if embedder != "off":
        pytest.importorskip("memvault_embed_minilm", reason="the default embedder is not installed")
    root = tmp_path_factory.mktemp(f"erasure-served-{embedder}")
    db_path = root / "served.db"
    seed(db_path)
    server = ServerProcess(
        memvault_command("--config", str(write_config(root, db_path, embedder)), "serve"),
        root,
        drop_env=("MEMVAULT_EMBEDDER",),
    )
    try:
        yield Service(server, db_path)
    finally:
        server.stop()


def test_subject_erasure_under_busy_readers_is_never_reported_complete_with_residue(service: Service) -> None:
    pending_seen = 0
    with readers(service.server.url):
        for n in range(2):
            marker = f"zqxbusyreaders{n}marker"
            service.retain(f"{marker} lives at 4 Elm Street\n", key=f"busy-{n}", subject=f"busy-subject-{n}")
            first, _retries = service.erase_until_complete(f"busy-subject-{n}", marker.encode())
            assert first["removed"] == 1
            pending_seen += bool(first.get("pending"))
            assert service.read(f"busy-{n}") == ""
    # Honest reporting was exercised, not only the easy path: with eight readers the
    # first scrub attempt cannot truncate the log.
    assert pending_seen >= 1


def test_pending_erasure_shows_in_health_and_a_retry_finishes_it(service: Service) -> None:
    marker = b"zqxheldreadermarker"
    service.retain(f"{marker.decode()} phone 555-0100\n", key="held", subject="held-subject")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(service.db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline().strip() == "holding"
        with readers(service.server.url):
            first = service.forget("held-subject")
            assert first == {"removed": 1, "pending": True}
            deadline = time.monotonic() + DEADLINE
            while service.health().get("pending_erasures", 0) < 1:
                assert time.monotonic() < deadline, "health never reported the pending erasure"
                time.sleep(0.2)
            assert service.forget("held-subject") == {"removed": 0, "pending": True}
            assert service.read("held") == ""
            holder.stdin.write("release\n")
            holder.stdin.flush()
            assert holder.wait(DEADLINE) == 0
            _, _retries = service.erase_until_complete("held-subject", marker)
        deadline = time.monotonic() + DEADLINE
        while service.health().get("pending_erasures", 0) != 0:
            assert time.monotonic() < deadline, "health kept reporting a finished erasure"
            time.sleep(0.2)
        assert marker not in raw_bytes(service.db_path)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(5)


def test_document_of_two_subjects_is_erased_for_the_first_under_busy_readers(service: Service) -> None:
    marker = b"zqxtwosubjectsmarker"
    service.retain(f"{marker.decode()} first words\n", key="shared", subject="user-43")
    service.retain("second words\n", key="shared", subject="user-44")
    with readers(service.server.url):
        first, _ = service.erase_until_complete("user-43", marker)
        assert first["removed"] == 1
        assert service.read("shared") == ""
        # no line holds the erased words (a service that recalls by meaning may return other lines, P36)
        assert [h for h in service.recall_hits("zqxtwosubjectsmarker") if "zqxtwosubjectsmarker" in h["snippet"]] == []
        # the other subject's tag went with the document: a new document at the label is untouched
        service.retain("fresh and untagged\n", key="shared")
        assert service.forget("user-44") == {"removed": 0}
        assert service.read("shared") == "fresh and untagged\n"
    assert marker not in raw_bytes(service.db_path)
    assert json.dumps(service.health()).count("pending_erasures") == 0
