"""Recall by meaning in the sqlite provider (contract P36-P40): vectors in the database file,
written and deleted in the lines' transactions, scoped to the partition inside the query,
the same hits as the memory provider for the same store."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlite_helpers import raw_bytes

import memvault
from memvault.contract.embedding import vector_bytes
from memvault.providers.memory import MemoryProvider
from memvault_parity.vectors import ConceptEmbedder
from memvault_sqlite import SqliteProvider

# The parity suite's deterministic embedder: the words of one concept share a dimension.
FACTS = "Drives a 2019 Subaru Outback, dark green.\nThe user is allergic to peanuts.\nWorks from Lisbon on Fridays.\n"


def _vault(path: Path | str, embedder: ConceptEmbedder | None = None) -> memvault.Vault:
    provider = SqliteProvider(str(path))
    return memvault.Vault(
        provider,
        name="sqlite",
        capabilities=provider.capabilities,
        embedder=embedder or ConceptEmbedder(),
        background_embedding=False,
    )


@pytest.fixture
def vault(db_path: Path) -> Iterator[memvault.Vault]:
    v = _vault(db_path)
    try:
        yield v
    finally:
        v.close()


def _retain(vault: memvault.Vault, content: str, *, agent: str = "a1", tier: str = "AGENT", **kw: str) -> None:
    mode = kw.pop("mode", "append")
    vault.retain(memvault.RetainRequest(workspace_id="w1", agent_id=agent, tier=tier, content=content, mode=mode, **kw))


def _recall(vault: memvault.Vault, query: str, *, agent: str = "a1", **kw: object) -> list[memvault.RecallSnippet]:
    return vault.recall(memvault.RecallRequest(workspace_id="w1", agent_id=agent, query=query, **kw)).hits  # type: ignore[arg-type]


def _vector_rows(db_path: Path) -> list[tuple[int, str, str, str]]:
    """(line id, model, digest, the line's text or None) of every stored vector."""
    conn = sqlite3.connect(str(db_path))
    try:
        return conn.execute(
            "SELECT v.line_id, v.model, v.digest, l.text FROM line_vectors AS v"
            " LEFT JOIN lines AS l ON l.id = v.line_id"
        ).fetchall()
    finally:
        conn.close()


def test_the_provider_declares_vectors() -> None:
    assert memvault.Capability.VECTORS in SqliteProvider.capabilities


def test_p36_a_question_in_other_words_finds_the_fact_once_embedded(vault: memvault.Vault) -> None:
    _retain(vault, FACTS)
    assert _recall(vault, "Which automobile?") == []  # no shared word, nothing embedded yet
    assert [(h.source, h.line) for h in _recall(vault, "peanuts")] == [("AGENT.md", 2)]  # P20: by its words at once
    report = vault.embed_pending()
    assert report is not None
    assert (report.embedded, report.backlog) == (3, 0)
    [hit, *_] = _recall(vault, "Which automobile?")
    assert (hit.source, hit.line, hit.lexical) == ("AGENT.md", 1, 0.0)
    assert hit.similarity is not None
    assert hit.similarity > 0.3
    assert hit.digest == memvault.body_sha256(FACTS)


def test_p37_the_backlog_is_durable_across_reopening(db_path: Path) -> None:
    first = _vault(db_path)
    _retain(first, FACTS)
    assert first.embedding_backlog() == 3
    first.close()  # nothing embedded: the lines wait in the file, not in the process
    second = _vault(db_path)
    try:
        assert second.embedding_backlog() == 3
        assert second.health().embedding_backlog == 3
        second.embed_pending()
        assert second.embedding_backlog() == 0
    finally:
        second.close()
    third = _vault(db_path)
    try:
        assert third.embedding_backlog() == 0
        assert _recall(third, "Which automobile?")[0].line == 1
    finally:
        third.close()


def test_p38_vectors_never_cross_partitions_or_tiers(vault: memvault.Vault) -> None:
    _retain(vault, FACTS, agent="a1")
    _retain(vault, "Rides a bicycle.\n", agent="a2", tier="pins")
    _retain(vault, "Has a labrador.\n", agent="a1", tier="daily", key="2025-01-02")
    vault.embed_pending()
    assert [h.source for h in _recall(vault, "vehicle", agent="a1")] == ["AGENT.md"]
    assert [h.source for h in _recall(vault, "vehicle bicycle", agent="a2")] == ["pins.md"]
    assert _recall(vault, "vehicle", agent="a2") == []
    assert _recall(vault, "puppy", agent="a1", tier="AGENT") == []  # the daily note is another tier
    assert [h.source for h in _recall(vault, "puppy", agent="a1")] == ["daily/2025-01-02.md"]


def test_p38_vectors_of_another_model_are_never_compared(db_path: Path) -> None:
    old = _vault(db_path, ConceptEmbedder("v1"))
    _retain(old, FACTS)
    old.embed_pending()
    old.close()
    new = _vault(db_path, ConceptEmbedder("v2"))
    try:
        assert new.embedding_backlog() == 3  # a changed model is detected: every line waits again
        assert _recall(new, "Which automobile?") == []  # never ranked with v1's vectors
        new.embed_pending()
        assert new.embedding_backlog() == 0
        assert _recall(new, "Which automobile?")[0].line == 1
        # One vector per line: v2's replaced v1's.
        assert {row[1] for row in _vector_rows(db_path)} == {"v2"}
        assert len(_vector_rows(db_path)) == 3
    finally:
        new.close()


def test_p37_replace_leaves_no_stale_vector(vault: memvault.Vault, db_path: Path) -> None:
    _retain(vault, "Drives a Subaru.\n", mode="replace")
    vault.embed_pending()
    _retain(vault, "Takes the train everywhere.\n", mode="replace")
    assert all("Subaru" not in hit.snippet for hit in _recall(vault, "automobile"))
    assert vault.embedding_backlog() == 1
    assert _vector_rows(db_path) == []  # deleted with the line, in the retain's transaction
    vault.embed_pending()
    assert [row[3] for row in _vector_rows(db_path)] == ["Takes the train everywhere."]


def test_p37_an_append_keeps_unchanged_lines_vectors_and_re_embeds_a_joined_line(
    vault: memvault.Vault, db_path: Path
) -> None:
    _retain(vault, FACTS)
    vault.embed_pending()
    _retain(vault, "Has a labrador.\n")
    assert vault.embedding_backlog() == 1
    assert _recall(vault, "Which automobile?")[0].line == 1  # still found by meaning before re-embedding
    _retain(vault, "Owns a cat", tier="pins")
    vault.embed_pending()
    _retain(vault, " and drives a Subaru.\n", tier="pins")
    assert vault.embedding_backlog() == 1
    vault.embed_pending()
    [hit] = [h for h in _recall(vault, "automobile") if h.source == "pins.md"]
    assert hit.snippet == "Owns a cat and drives a Subaru."
    rows = _vector_rows(db_path)
    assert len(rows) == 5
    assert all(text is not None and memvault.line_digest(text) == digest for _, _, digest, text in rows)


def test_p37_a_vector_for_a_line_that_changed_since_it_was_handed_out_is_not_stored(
    vault: memvault.Vault, db_path: Path
) -> None:
    _retain(vault, "Drives a Subaru.\n", mode="replace")
    hook = vault.plugin_manager.hook
    [line] = hook.memvault_vectors_pending(model_id="concepts-1", limit=64)
    _retain(vault, "Takes the train.\n", mode="replace")  # the line changed under the embedder
    blob = vector_bytes(ConceptEmbedder().embed([line.text])[0])
    assert hook.memvault_vectors_store(model_id="concepts-1", vectors=[(line.key, blob)]) == 0
    assert hook.memvault_vectors_store(model_id="concepts-1", vectors=[("junk", blob), ("9:zz", blob)]) == 0
    assert _vector_rows(db_path) == []
    assert vault.embedding_backlog() == 1


@pytest.mark.parametrize("how", ["id", "subject"])
def test_p40_forget_removes_the_vectors_to_the_byte(vault: memvault.Vault, db_path: Path, how: str) -> None:
    secret = "Drives a zqxvectormarker Subaru."
    for day in range(1, 6):  # other text around it, in other pages
        _retain(
            vault,
            "".join(f"ordinary note {day} {i} about gardens\n" for i in range(40)),
            tier="daily",
            key=f"2025-01-0{day}",
        )
    _retain(vault, f"{secret}\n", tier="pins", data_subject_id="alice")
    vault.embed_pending()
    blob = vector_bytes(ConceptEmbedder().embed([secret])[0])
    assert blob in raw_bytes(db_path), "precondition: the vector reached the files"
    if how == "id":
        vault.forget(memvault.ForgetRequest(workspace_id="w1", agent_id="a1", id="pins.md"))
    else:
        vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id="alice"))
    assert [row for row in _vector_rows(db_path) if row[3] is None or "zqx" in row[3]] == []
    stored = raw_bytes(db_path)
    assert blob not in stored
    assert b"zqxvectormarker" not in stored
    assert _recall(vault, "automobile") == []
    _retain(vault, "Something else entirely.\n", tier="pins")  # a new document at the label: no old vector
    assert vault.embedding_backlog() == 1


def test_p37_pending_and_backlog_use_indexes_not_scans(vault: memvault.Vault, db_path: Path) -> None:
    _retain(vault, FACTS)
    conn = sqlite3.connect(str(db_path))
    try:
        plans = [
            " ".join(str(r[-1]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
            for sql, params in (
                ("SELECT id, text FROM lines WHERE needs_vector = 1 ORDER BY id LIMIT 64", ()),
                ("SELECT count(*) FROM lines WHERE needs_vector = 1", ()),
                ("SELECT count(*) FROM line_vectors WHERE model < ?", ("m",)),
                ("SELECT count(*) FROM line_vectors WHERE model > ?", ("m",)),
            )
        ]
    finally:
        conn.close()
    # The partial index holds only the lines without a vector; the model index is read as two ranges.
    assert all("USING INDEX lines_without_vector" in plan for plan in plans[:2]), plans
    assert all("SEARCH line_vectors USING COVERING INDEX line_vectors_by_model" in plan for plan in plans[2:]), plans


def test_a_schema_6_file_gains_vectors_and_every_line_waits_for_one(db_path: Path) -> None:
    with memvault.open("sqlite", path=str(db_path), scanner="off") as plain:
        plain.retain(
            memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="AGENT", content=FACTS, mode="append")
        )
    conn = sqlite3.connect(str(db_path))  # back to v6 as that release wrote it
    conn.execute("DROP TABLE line_vectors")
    conn.execute("DROP INDEX lines_without_vector")
    conn.execute("ALTER TABLE lines DROP COLUMN needs_vector")
    conn.execute("PRAGMA user_version = 6")
    conn.commit()
    conn.close()
    upgraded = _vault(db_path)
    try:
        assert upgraded.embedding_backlog() == 3
        upgraded.embed_pending()
        assert _recall(upgraded, "Which automobile?")[0].line == 1
    finally:
        upgraded.close()


def test_two_processes_one_writes_the_others_drain_embeds_it(vault: memvault.Vault, db_path: Path) -> None:
    _retain(vault, "Owns a labrador.\n")
    vault.embed_pending()
    script = textwrap.dedent(
        """
        import sys
        import memvault
        with memvault.open("sqlite", path=sys.argv[1], scanner="off", embedder="off") as other:
            other.retain(memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="AGENT",
                                                content="Drives a Subaru.\\n", mode="append"))
        """
    )
    subprocess.run([sys.executable, "-c", script, str(db_path)], check=True, timeout=60)
    assert vault.embedding_backlog() == 1
    assert vault.embed_pending().embedded == 1  # type: ignore[union-attr]
    assert [h.line for h in _recall(vault, "automobile")] == [2]


# -- the same hits as the memory provider ------------------------------------------------

WORDS = tuple(
    [
        "car",
        "vehicle",
        "subaru",
        "drives",
        "automobile",
        "peanuts",
        "nut",
        "allergic",
        "dog",
        "puppy",
        "labrador",
        "pet",
        "garden",
        "lisbon",
        "friday",
        "works",
        "train",
        "coffee",
        "sister",
        "birthday",
        "paris",
        "meeting",
        "report",
        "music",
        "guitar",
        "bicycle",
    ]
)


def _random_store(seed: int) -> tuple[list[memvault.RetainRequest], list[str]]:
    rng = random.Random(seed)
    writes = []
    for _ in range(40):
        agent = rng.choice(["a1", "a2"])
        tier, key = rng.choice([("AGENT", ""), ("daily", "2025-01-02"), ("daily", "2025-01-03"), ("pins", "")])
        lines = ["" if rng.random() < 0.1 else " ".join(rng.choices(WORDS, k=rng.randint(2, 7))) for _ in range(3)]
        content = "\n".join(lines) + ("\n" if rng.random() < 0.8 else "")
        writes.append(
            memvault.RetainRequest(
                workspace_id="w1",
                agent_id=agent,
                tier=tier,
                key=key,
                content=content,
                mode="replace" if rng.random() < 0.2 else "append",
            )
        )
    queries = [" ".join(rng.choices(WORDS, k=rng.randint(1, 3))) for _ in range(25)] + ["which", "the automobile?"]
    return writes, queries


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_p36_the_same_hits_as_the_memory_provider(tmp_path: Path, seed: int) -> None:
    writes, queries = _random_store(seed)
    memory_provider = MemoryProvider()
    memory = memvault.Vault(
        memory_provider,
        name="memory",
        capabilities=memory_provider.capabilities,
        embedder=ConceptEmbedder(),
        background_embedding=False,
    )
    sqlite = _vault(tmp_path / "same.db")
    try:
        for i, request in enumerate(writes):
            for v in (memory, sqlite):
                v.retain(request)
            if i == 20:  # half embedded, then more writes (replaces, appends) on top
                memory.embed_pending()
                sqlite.embed_pending()
        for embedded in (False, True):
            if embedded:
                memory.embed_pending()
                sqlite.embed_pending()
            for query in queries:
                for agent in ("a1", "a2"):
                    request = memvault.RecallRequest(workspace_id="w1", agent_id=agent, query=query, limit=8)
                    assert sqlite.recall(request).hits == memory.recall(request).hits, (query, agent, embedded)
    finally:
        sqlite.close()
        memory.close()
