"""Erasure over a real ``memvault serve`` on local-disk while 8 clients keep recalling (P13, P24, P40).

The same scene as ``test_erasure_over_service.py`` (which serves sqlite), with the
store a local-disk folder: eight clients recall a partition of 2,000 lines in a
loop, by words, and once more with the service recalling by meaning (the default
embedder, its vectors in ``.<name>.vectors`` sidecars beside the documents).
After each erasure the test reads every file under the root (from this process)
for the erased text and for the bytes of its line's vector. The property: an
answer with ``pending`` false (or absent) means neither is in any file at that
moment, nor later (the background embedder must not write the vector back), no
recall returns the line (by its words, or by a paraphrase that shares none of
them), and health counts no pending erasure. local-disk unlinks before it
answers, so it never answers ``pending`` (docs/operators/local-disk.md).
"""

from __future__ import annotations

import json
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
#: A line about something else than the partition's, and a question about it sharing none of its words:
#: only a recall by meaning finds the line by it.
SECRET = "Orlando injects insulin twice daily because of his diabetes"
PARAPHRASE = "which medicine does he take for blood sugar"
DEADLINE = 60.0
TOKENS = [f"erasure-token-{n:02d}-abcdefgh" for n in range(READERS + 1)]
PEERS = ("t-erasure", "agents", "a1", "peers")


def seed(root: Path, embedder: str) -> None:
    """2,000 lines the readers recall, and (by meaning) their vectors, so the service starts with no backlog."""
    with memvault.open("local-disk", root=str(root), scanner="off", embedder=embedder) as vault:
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


def write_config(root: Path, store: Path, embedder: str) -> Path:
    # One token per client, so a per-token concurrency bound never turns the readers away.
    tokens = "".join(
        f'[[server.tokens]]\nname = "erasure-{n}"\nsha256 = "{hash_token(token)}"\nworkspaces = ["t-*"]\n'
        for n, token in enumerate(TOKENS)
    )
    config = root / "memvault.toml"
    config.write_text(
        f'provider = "local-disk"\n[embed]\nembedder = "{embedder}"\n[providers.local-disk]\nroot = "{store}"\n'
        f"[server]\nport = 0\n{tokens}",
        encoding="utf-8",
    )
    return config


def files_holding(store: Path, *needles: bytes) -> list[str]:
    """Every file under the store (dot files, sidecars, journals, temporaries) holding one of ``needles``."""
    found = []
    for path in sorted(store.rglob("*")):
        try:
            data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
        except FileNotFoundError:
            continue  # a temporary renamed meanwhile: its bytes are in its target, read next
        found += [f"{path.relative_to(store)}: {needle[:40]!r}" for needle in needles if needle in data]
    return found


class Service:
    def __init__(self, server: ServerProcess, store: Path, embedder: str) -> None:
        self.server = server
        self.store = store
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
        return str(
            self.post("/v1/read", {"workspace_id": WORKSPACE, "agent_id": "a1", "tier": "peers", "key": key})["content"]
        )

    def snippets(self, query: str) -> list[str]:
        hits = self.post("/v1/recall", {"workspace_id": WORKSPACE, "agent_id": "a1", "query": query})["hits"]
        return [str(h["snippet"]) for h in hits]

    def vector_of(self, key: str) -> bytes:
        """The bytes of line 1's vector in document ``peers/<key>.md``'s sidecar, once the service stored it."""
        from memvault_local_disk.vectors import decode_sidecar, sidecar_name

        sidecar = self.store.joinpath(*PEERS, sidecar_name(f"{key}.md"))
        deadline = time.monotonic() + DEADLINE
        while True:
            parsed = decode_sidecar(sidecar.read_bytes()) if sidecar.exists() else None
            if parsed is not None and 1 in parsed.entries:
                return parsed.entries[1][1]
            assert time.monotonic() < deadline, "the service never embedded the line"
            time.sleep(0.1)

    def settled(self) -> None:
        """Wait until the service's embedder has nothing left to do (a store it was making is finished)."""
        deadline = time.monotonic() + DEADLINE
        while self.health().get("embedding_backlog", 0):
            assert time.monotonic() < deadline, "the embedding backlog never drained"
            time.sleep(0.1)
        time.sleep(0.5)  # a batch handed out just before its lines went: stored (or skipped) by now

    def erase(self, subject: str, *needles: bytes) -> float:
        """Erase the subject's one document; the answer is complete (local-disk never answers ``pending``), so
        no file may hold ``needles`` any more. :return: how long the forget took, in seconds."""
        start = time.monotonic()
        answer = self.forget(subject)
        took = time.monotonic() - start
        assert answer == {"removed": 1}
        assert files_holding(self.store, *needles) == [], "a complete erasure left its text on disk"
        return took


def readers(url: str) -> Readers:
    """Eight clients recalling the partition in a loop, each with its own token."""
    return Readers(url, TOKENS[:READERS], WORKSPACE, QUERY, DEADLINE)


@pytest.fixture(scope="module", params=["off", "minilm"], ids=["by-words", "by-meaning"])
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    embedder = str(request.param)
    if embedder != "off":
        pytest.importorskip("memvault_embed_minilm", reason="the default embedder is not installed")
    pytest.importorskip("memvault_local_disk", reason="these tests serve a local-disk store")
    root = tmp_path_factory.mktemp(f"erasure-local-disk-{embedder}")
    store = root / "memory"
    seed(store, embedder)
    server = ServerProcess(
        memvault_command("--config", str(write_config(root, store, embedder)), "serve"),
        root,
        drop_env=("MEMVAULT_EMBEDDER",),
    )
    try:
        yield Service(server, store, embedder)
    finally:
        server.stop()


def test_subject_erasure_under_busy_readers_leaves_no_text_nor_vector_on_disk(service: Service) -> None:
    with readers(service.server.url) as busy:
        # Round 0 erases a line the embedder may be embedding right then; round 1 one whose vector is stored.
        for n in range(2):
            marker = f"zqxbusyreaders{n}marker"
            service.retain(f"{marker}: {SECRET}\n", key=f"busy-{n}", subject=f"busy-subject-{n}")
            needles = [marker.encode()]
            if service.by_meaning and n == 1:
                needles.append(service.vector_of(f"busy-{n}"))
                assert any(marker in s for s in service.snippets(PARAPHRASE)), "precondition: found by meaning"
            before = sum(busy.done)
            took = service.erase(f"busy-subject-{n}", *needles)
            print(f"round {n}: erased in {took:.2f} s, {sum(busy.done) - before} recalls meanwhile")
            assert service.read(f"busy-{n}") == ""
            assert not [s for q in (marker, PARAPHRASE) for s in service.snippets(q) if marker in s]
            assert "pending_erasures" not in service.health()
            service.settled()
            assert files_holding(service.store, *needles) == [], "the erased line came back after the erasure"


def test_document_of_two_subjects_is_erased_for_the_first_under_busy_readers(service: Service) -> None:
    marker = "zqxtwosubjectsmarker"
    service.retain(f"{marker}: {SECRET}\n", key="shared", subject="user-43")
    service.retain("second words\n", key="shared", subject="user-44")
    needles = [marker.encode()] + ([service.vector_of("shared")] if service.by_meaning else [])
    with readers(service.server.url):
        service.erase("user-43", *needles)
        assert service.read("shared") == ""
        assert not [s for q in (marker, PARAPHRASE) for s in service.snippets(q) if marker in s]
        # the other subject's tag went with the document: a new document at the label is untouched
        service.retain("fresh and untagged\n", key="shared")
        assert service.forget("user-44") == {"removed": 0}
        assert service.read("shared") == "fresh and untagged\n"
    service.settled()
    assert files_holding(service.store, *needles) == []
    assert json.dumps(service.health()).count("pending_erasures") == 0
