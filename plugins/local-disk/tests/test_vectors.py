"""Recall by meaning in the local-disk provider (contract P36-P40): a sidecar of vectors beside
each document (``.<name>.vectors``), written atomically under the document's lock, removed with
the document and by a replace, ignored (its lines pending again) when it is damaged, and the
same hits as the memory provider for the same store."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import memvault
from memvault.contract.embedding import line_digest
from memvault.providers.memory import MemoryProvider
from memvault_local_disk.index import RACY_NS
from memvault_local_disk.vectors import decode_sidecar
from memvault_parity.vectors import ConceptEmbedder

FACTS = "Drives a 2019 Subaru Outback, dark green.\nThe user is allergic to peanuts.\nWorks from Lisbon on Fridays.\n"


def _vault(root: Path, embedder: ConceptEmbedder | None = None) -> memvault.Vault:
    return memvault.open(
        "local-disk", root=str(root), embedder=embedder or ConceptEmbedder(), background_embedding=False
    )


def _retain(vault: memvault.Vault, content: str, **fields: str) -> None:
    values = {"workspace_id": "w1", "agent_id": "ada", "tier": "AGENT", "mode": "append", **fields}
    vault.retain(memvault.RetainRequest(content=content, **values))


def _recall(vault: memvault.Vault, query: str, **fields: str) -> list[memvault.RecallSnippet]:
    values = {"workspace_id": "w1", "agent_id": "ada", **fields}
    return vault.recall(memvault.RecallRequest(query=query, limit=10, **values)).hits


def _agent_folder(root: Path) -> Path:
    return root / "w1" / "agents" / "ada"


def _provider_files(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith("."))


def test_the_provider_declares_vectors(root: Path) -> None:
    with _vault(root) as vault:
        assert memvault.Capability.VECTORS in vault.capabilities


def test_p36_a_question_in_other_words_finds_the_fact_once_embedded(root: Path) -> None:
    with _vault(root) as vault:
        _retain(vault, FACTS)
        assert vault.embedding_backlog() == 3
        assert _recall(vault, "which automobile") == [], "nothing shares a word, and nothing is embedded yet"
        report = vault.embed_pending()
        assert report is not None
        assert (report.embedded, report.backlog) == (3, 0)
        [hit, *_] = _recall(vault, "which automobile")
        assert (hit.source, hit.line, hit.lexical) == ("AGENT.md", 1, 0.0)
        assert hit.similarity is not None
        assert hit.similarity > 0.3
        assert ".AGENT.md.vectors" in _provider_files(_agent_folder(root))


def test_p37_the_backlog_survives_reopening_and_another_process_embeds_it(root: Path) -> None:
    with _vault(root) as writer:
        _retain(writer, FACTS)
        _retain(writer, "Walks the labrador at dawn.\n", tier="daily", key="2024-05-01")
    with _vault(root) as reader:
        assert reader.embedding_backlog() == 4, "pending lines are durable: the files say what waits"
    script = textwrap.dedent(
        f"""
        import memvault
        from memvault_parity.vectors import ConceptEmbedder
        with memvault.open("local-disk", root={str(root)!r}, embedder=ConceptEmbedder(),
                           background_embedding=False) as vault:
            print(vault.embed_pending().embedded)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["4"]
    with _vault(root) as again:
        assert again.embedding_backlog() == 0, "another process's vectors are seen"
        assert [(h.source, h.line) for h in _recall(again, "a pet at home")][:1] == [("daily/2024-05-01.md", 1)]


def test_p37_a_vault_sees_vectors_another_vault_stored_meanwhile(root: Path) -> None:
    """The pending and backlog caches are keyed by the files' stat: another writer's store is seen."""
    with _vault(root) as first, _vault(root) as second:
        _retain(first, FACTS)
        time.sleep(RACY_NS / 1e9 + 0.2)  # old enough for the count to be kept by the files' stat
        assert first.embedding_backlog() == 3
        second.embed_pending()
        assert first.embedding_backlog() == 0
        _retain(second, "Has a puppy.\n")
        assert first.embedding_backlog() == 1
        assert _recall(first, "which automobile")[0].line == 1


def test_p40_forget_by_id_leaves_no_sidecar_nor_temporary(root: Path) -> None:
    with _vault(root) as vault:
        _retain(vault, FACTS)
        _retain(vault, "Walks the labrador at dawn.\n", tier="daily", key="2024-05-01")
        vault.embed_pending()
        daily = _agent_folder(root) / "daily"
        assert ".2024-05-01.md.vectors" in _provider_files(daily)
        for label in ("AGENT.md", "daily/2024-05-01.md"):
            assert vault.forget(memvault.ForgetRequest(workspace_id="w1", agent_id="ada", id=label)).removed == 1
        assert _provider_files(_agent_folder(root)) == []
        assert _provider_files(daily) == []
        assert vault.embedding_backlog() == 0


def test_p40_erasure_by_subject_removes_its_documents_sidecars_only(root: Path) -> None:
    with _vault(root) as vault:
        _retain(vault, FACTS, data_subject_id="subject-a")
        _retain(vault, "Owns a sedan.\n", tier="pins", data_subject_id="subject-b")
        vault.embed_pending()
        folder = _agent_folder(root)
        assert {".AGENT.md.vectors", ".pins.md.vectors"} <= set(_provider_files(folder))
        vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id="subject-a"))
        left = _provider_files(folder)
        assert ".AGENT.md.vectors" not in left
        assert ".pins.md.vectors" in left
        assert not [name for name in left if ".tmp-" in name]
        assert [(h.source, h.line) for h in _recall(vault, "automobile")] == [("pins.md", 1)]


def test_p40_erasure_removes_the_sidecar_of_a_document_deleted_by_hand_and_crash_temporaries(root: Path) -> None:
    """Vectors of text deleted by hand, and a crashed sidecar write's temporary, do not outlive an erasure."""
    with _vault(root) as vault:
        _retain(vault, FACTS)
        vault.embed_pending()
        folder = _agent_folder(root)
        (folder / "AGENT.md").unlink()
        sidecar = (folder / ".AGENT.md.vectors").read_bytes()
        (folder / "..pins.md.vectors.tmp-1-abcdef").write_bytes(sidecar)
        vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id="nobody"))
        assert not [name for name in _provider_files(folder) if "vectors" in name]


def test_a_crashed_sidecar_write_leaves_no_temporary_after_the_next_write(root: Path) -> None:
    with _vault(root) as vault:
        _retain(vault, FACTS)
        folder = _agent_folder(root)
        (folder / "..AGENT.md.vectors.tmp-1-abcdef").write_bytes(b"half a sidecar")
        _retain(vault, "Has a puppy.\n")
        assert not [name for name in _provider_files(folder) if ".tmp-" in name]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped", "empty", "folder"])
def test_a_damaged_sidecar_makes_its_lines_pending_never_an_error(root: Path, damage: str) -> None:
    with _vault(root) as vault:
        _retain(vault, FACTS)
        vault.embed_pending()
        sidecar = _agent_folder(root) / ".AGENT.md.vectors"
        data = sidecar.read_bytes()
        if damage == "garbage":
            sidecar.write_bytes(b"not a sidecar at all\n")
        elif damage == "truncated":
            sidecar.write_bytes(data[:-7])
        elif damage == "flipped":
            sidecar.write_bytes(data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:])
        elif damage == "empty":
            sidecar.write_bytes(b"")
        else:
            sidecar.unlink()
            sidecar.mkdir()
        assert vault.embedding_backlog() == 3, "a damaged sidecar counts as no vectors"
        assert _recall(vault, "which automobile") == [], "its vectors are not used"
        assert [h.line for h in _recall(vault, "Subaru")] == [1], "recall by words is unaffected"
        if damage == "folder":
            sidecar.rmdir()
        vault.embed_pending()
        assert vault.embedding_backlog() == 0
        assert _recall(vault, "which automobile")[0].line == 1


def test_p37_a_replace_leaves_no_vector_of_the_old_text_on_disk(root: Path) -> None:
    with _vault(root) as vault:
        _retain(vault, FACTS)
        vault.embed_pending()
        sidecar = _agent_folder(root) / ".AGENT.md.vectors"
        old = sidecar.read_bytes()
        _retain(vault, "Takes the train everywhere.\nHas a puppy.\n", mode="replace")
        assert not sidecar.exists(), "the old text's vectors went with it"
        vault.embed_pending()
        data = sidecar.read_bytes()
        parsed = decode_sidecar(data)
        assert parsed is not None
        assert {digest for digest, _ in parsed.entries.values()} == {
            line_digest("Takes the train everywhere."),
            line_digest("Has a puppy."),
        }
        for line in FACTS.splitlines():
            assert bytes.fromhex(line_digest(line)) not in data
        assert old != data


def test_p37_an_append_keeps_the_sidecar_and_re_embeds_only_the_changed_line(root: Path) -> None:
    with _vault(root) as vault:
        _retain(vault, "Owns a cello")
        _retain(vault, "\nHas a puppy")
        vault.embed_pending()
        _retain(vault, " and a Subaru.\n")
        assert vault.embedding_backlog() == 1
        vault.embed_pending()
        parsed = decode_sidecar((_agent_folder(root) / ".AGENT.md.vectors").read_bytes())
        assert parsed is not None
        assert {n: d for n, (d, _) in parsed.entries.items()} == {
            1: line_digest("Owns a cello"),
            2: line_digest("Has a puppy and a Subaru."),
        }, "the sidecar keeps only vectors of the current text"


def test_sidecars_are_never_listed_as_documents(root: Path) -> None:
    with _vault(root) as vault:
        _retain(vault, FACTS)
        _retain(vault, "Walks the labrador at dawn.\n", tier="daily", key="2024-05-01")
        vault.embed_pending()
        listed = vault.list_documents(memvault.ListDocumentsRequest(workspace_id="w1"))
        assert sorted(d.label for d in listed.documents) == ["AGENT.md", "daily/2024-05-01.md"]


def test_p38_a_changed_model_rewrites_the_sidecar_with_its_own_vectors_only(root: Path) -> None:
    with _vault(root, ConceptEmbedder("concepts-1")) as first:
        _retain(first, FACTS)
        first.embed_pending()
    with _vault(root, ConceptEmbedder("concepts-2")) as second:
        assert second.embedding_backlog() == 3
        assert _recall(second, "which automobile") == []
        second.embed_pending()
        parsed = decode_sidecar((_agent_folder(root) / ".AGENT.md.vectors").read_bytes())
        assert parsed is not None
        assert (parsed.model_id, len(parsed.entries)) == ("concepts-2", 3)
    with _vault(root, ConceptEmbedder("concepts-1")) as first_again:
        assert first_again.embedding_backlog() == 3


WORDS = ["car", "subaru", "dog", "puppy", "peanut", "allergy", "cello", "train", "green", "lisbon", "bicycle"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_p36_the_same_hits_as_the_memory_provider(root: Path, seed: int) -> None:
    rng = random.Random(seed)
    memory_provider = MemoryProvider()
    memory = memvault.Vault(
        memory_provider,
        name="memory",
        capabilities=memory_provider.capabilities,
        embedder=ConceptEmbedder(),
        background_embedding=False,
    )
    disk = _vault(root)
    try:
        for i in range(40):
            agent = rng.choice(["a1", "a2"])
            tier, key = rng.choice([("AGENT", ""), ("daily", "2025-01-02"), ("daily", "2025-01-03"), ("pins", "")])
            lines = ["" if rng.random() < 0.1 else " ".join(rng.choices(WORDS, k=rng.randint(2, 7))) for _ in range(3)]
            request = memvault.RetainRequest(
                workspace_id="w1",
                agent_id=agent,
                tier=tier,
                key=key,
                content="\n".join(lines) + ("\n" if rng.random() < 0.8 else ""),
                mode="replace" if rng.random() < 0.2 else "append",
            )
            for v in (memory, disk):
                v.retain(request)
            if i == 20:  # half embedded, then more writes (replaces, appends) on top
                memory.embed_pending()
                disk.embed_pending()
        queries = [" ".join(rng.choices(WORDS, k=rng.randint(1, 3))) for _ in range(25)] + ["the automobile?"]
        for embedded in (False, True):
            if embedded:
                memory.embed_pending()
                disk.embed_pending()
            assert disk.embedding_backlog() == memory.embedding_backlog()
            for query in queries:
                for agent in ("a1", "a2"):
                    request = memvault.RecallRequest(workspace_id="w1", agent_id=agent, query=query, limit=8)
                    assert disk.recall(request).hits == memory.recall(request).hits, (query, agent, embedded)
    finally:
        disk.close()
        memory.close()
