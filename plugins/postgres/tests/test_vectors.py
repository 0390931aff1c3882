"""Recall by meaning in the postgres provider (contract P36-P40): vectors in the provider's own
tables, written and deleted in the lines' transactions, scoped to the partitions inside the
statement, erased with the text, the same hits as the memory provider for the same store."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pytest

import memvault
from memvault.contract.embedding import vector_bytes
from memvault.providers.memory import MemoryProvider
from memvault_parity.vectors import ConceptEmbedder
from memvault_postgres import PostgresProvider
from memvault_postgres.schema import SCHEMA_VERSION
from memvault_postgres.testing import TemporaryCluster

# The parity suite's deterministic embedder: the words of one concept share a dimension.
FACTS = "Drives a 2019 Subaru Outback, dark green.\nThe user is allergic to peanuts.\nWorks from Lisbon on Fridays.\n"


def _vault(cluster: TemporaryCluster, schema: str, embedder: ConceptEmbedder | None = None) -> memvault.Vault:
    provider = PostgresProvider(cluster.dsn(), schema=schema)
    return memvault.Vault(
        provider,
        name="postgres",
        capabilities=provider.capabilities,
        embedder=embedder or ConceptEmbedder(),
        background_embedding=False,
    )


@pytest.fixture
def vault(cluster: TemporaryCluster, schema_name: str) -> Iterator[memvault.Vault]:
    v = _vault(cluster, schema_name)
    try:
        yield v
    finally:
        v.close()


def _retain(vault: memvault.Vault, content: str, *, agent: str = "a1", tier: str = "AGENT", **kw: str) -> None:
    mode = kw.pop("mode", "append")
    vault.retain(memvault.RetainRequest(workspace_id="w1", agent_id=agent, tier=tier, content=content, mode=mode, **kw))


def _recall(vault: memvault.Vault, query: str, *, agent: str = "a1", **kw: object) -> list[memvault.RecallSnippet]:
    return vault.recall(memvault.RecallRequest(workspace_id="w1", agent_id=agent, query=query, **kw)).hits  # type: ignore[arg-type]


def _vector_rows(cluster: TemporaryCluster, schema: str) -> list[tuple[str | None, str, str | None]]:
    """(model, digest, the line's text or None) of every stored vector."""
    with cluster.admin("memvault") as conn:
        return conn.execute(
            f"SELECT v.model, v.digest, l.text FROM {schema}.line_vectors AS v LEFT JOIN {schema}.lines AS l"
            " USING (partition_id, document_id, line_no) WHERE v.vector IS NOT NULL ORDER BY l.text"
        ).fetchall()


def _flush(cluster: TemporaryCluster) -> None:
    with cluster.admin("memvault") as conn:
        conn.execute("ANALYZE")
        conn.execute("CHECKPOINT")


def test_the_provider_declares_vectors() -> None:
    assert memvault.Capability.VECTORS in PostgresProvider.capabilities


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


def test_p37_the_backlog_is_durable_across_reopening(cluster: TemporaryCluster, schema_name: str) -> None:
    first = _vault(cluster, schema_name)
    _retain(first, FACTS)
    assert first.embedding_backlog() == 3
    first.close()
    second = _vault(cluster, schema_name)
    try:
        assert second.embedding_backlog() == 3
        second.embed_pending()
        assert second.embedding_backlog() == 0
    finally:
        second.close()
    third = _vault(cluster, schema_name)
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


def test_p38_vectors_of_another_model_are_never_compared(cluster: TemporaryCluster, schema_name: str) -> None:
    old = _vault(cluster, schema_name, ConceptEmbedder("v1"))
    _retain(old, FACTS)
    old.embed_pending()
    old.close()
    new = _vault(cluster, schema_name, ConceptEmbedder("v2"))
    try:
        assert new.embedding_backlog() == 3
        assert _recall(new, "Which automobile?") == []
        new.embed_pending()
        assert new.embedding_backlog() == 0
        assert _recall(new, "Which automobile?")[0].line == 1
        assert [row[0] for row in _vector_rows(cluster, schema_name)] == ["v2", "v2", "v2"]
    finally:
        new.close()


def test_p37_replace_leaves_no_stale_vector(vault: memvault.Vault, cluster: TemporaryCluster, schema_name: str) -> None:
    _retain(vault, "Drives a Subaru.\n", mode="replace")
    vault.embed_pending()
    _retain(vault, "Takes the train everywhere.\n", mode="replace")
    assert all("Subaru" not in hit.snippet for hit in _recall(vault, "automobile"))
    assert vault.embedding_backlog() == 1
    assert _vector_rows(cluster, schema_name) == []  # deleted with the line, in the retain's transaction
    vault.embed_pending()
    assert [row[2] for row in _vector_rows(cluster, schema_name)] == ["Takes the train everywhere."]


def test_p37_an_append_keeps_unchanged_lines_vectors_and_re_embeds_a_joined_line(
    vault: memvault.Vault, cluster: TemporaryCluster, schema_name: str
) -> None:
    _retain(vault, FACTS)
    vault.embed_pending()
    _retain(vault, "Has a labrador.\n")
    assert vault.embedding_backlog() == 1
    assert _recall(vault, "Which automobile?")[0].line == 1
    _retain(vault, "Owns a cat", tier="pins")
    vault.embed_pending()
    _retain(vault, " and drives a Subaru.\n", tier="pins")
    assert vault.embedding_backlog() == 1
    vault.embed_pending()
    [hit] = [h for h in _recall(vault, "automobile") if h.source == "pins.md"]
    assert hit.snippet == "Owns a cat and drives a Subaru."
    rows = _vector_rows(cluster, schema_name)
    assert len(rows) == 5
    assert all(text is not None and memvault.line_digest(text) == digest for _, digest, text in rows)


def test_p37_a_vector_for_a_line_that_changed_since_it_was_handed_out_is_not_stored(
    vault: memvault.Vault, cluster: TemporaryCluster, schema_name: str
) -> None:
    _retain(vault, "Drives a Subaru.\n", mode="replace")
    hook = vault.plugin_manager.hook
    [line] = hook.memvault_vectors_pending(model_id="concepts-1", limit=64)
    _retain(vault, "Takes the train.\n", mode="replace")  # the line changed under the embedder
    blob = vector_bytes(ConceptEmbedder().embed([line.text])[0])
    assert hook.memvault_vectors_store(model_id="concepts-1", vectors=[(line.key, blob)]) == 0
    assert hook.memvault_vectors_store(model_id="concepts-1", vectors=[("junk", blob), ("1:1:1:zz", blob)]) == 0
    assert _vector_rows(cluster, schema_name) == []
    assert vault.embedding_backlog() == 1


@pytest.mark.parametrize("how", ["subject", "id-then-subject"])
def test_p40_erasure_removes_the_vectors_from_the_data_files(
    vault: memvault.Vault, cluster: TemporaryCluster, schema_name: str, how: str
) -> None:
    """The vector rows go in the erasure's transaction, and the erasure rewrites their shard's files
    too (also after a forget by id, which rewrites nothing): no file outside pg_wal keeps the
    vector's bytes or the text."""
    marker = f"zqx{uuid.uuid4().hex}"
    secret = f"Drives a {marker} Subaru."
    _retain(vault, f"{secret}\n", tier="pins", data_subject_id="alice")
    _retain(vault, "someone else wrote this\n", tier="PERSONA", data_subject_id="bob")
    vault.embed_pending()
    blob = vector_bytes(ConceptEmbedder().embed([secret])[0])
    _flush(cluster)
    assert cluster.files_containing(blob), "precondition: the vector reached the data files"
    if how == "id-then-subject":
        forgotten = vault.forget(memvault.ForgetRequest(workspace_id="w1", agent_id="a1", id="pins.md"))
        assert forgotten.removed == 1
        assert [r for r in _vector_rows(cluster, schema_name) if r[2] is None or marker in r[2]] == []
    result = vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id="alice"))
    assert result.pending is False
    _flush(cluster)
    assert [row[2] for row in _vector_rows(cluster, schema_name)] == ["someone else wrote this"]
    assert cluster.files_containing(blob) == []
    assert cluster.files_containing(marker.encode()) == []
    assert _recall(vault, "automobile") == []


def test_a_schema_5_store_gains_vectors_and_every_line_waits_for_one(
    cluster: TemporaryCluster, schema_name: str
) -> None:
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off", embedder="off") as plain:
        plain.retain(
            memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="AGENT", content=FACTS, mode="append")
        )
    with cluster.admin("memvault") as conn:  # back to schema 5 as that release wrote it
        conn.execute(f"DROP TABLE {schema_name}.line_vectors")
        conn.execute(f"UPDATE {schema_name}.meta SET value = '5' WHERE key = 'schema_version'")
    upgraded = _vault(cluster, schema_name)
    try:
        assert upgraded.embedding_backlog() == 3
        upgraded.embed_pending()
        assert _recall(upgraded, "Which automobile?")[0].line == 1
    finally:
        upgraded.close()
    with cluster.admin("memvault") as conn:
        version = conn.execute(f"SELECT value FROM {schema_name}.meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)


def test_p37_pending_and_backlog_read_the_model_index(
    vault: memvault.Vault, cluster: TemporaryCluster, schema_name: str
) -> None:
    _retain(vault, FACTS)
    with cluster.admin("memvault") as conn:
        conn.execute(f"SET search_path TO {schema_name}")
        conn.execute("SET enable_seqscan = off")  # what the plan can use, whatever the table's size
        plans = [
            "\n".join(str(r[0]) for r in conn.execute(f"EXPLAIN {sql}", ("m",)))
            for sql in (
                "SELECT count(*) FROM line_vectors WHERE model IS NULL AND %s::text IS NOT NULL",
                "SELECT count(*) FROM line_vectors WHERE model < %s",
                "SELECT count(*) FROM line_vectors WHERE model > %s",
            )
        ]
    assert all("line_vectors" in plan and "Seq Scan" not in plan for plan in plans), plans


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


@pytest.mark.parametrize("seed", [1, 2])
def test_p36_the_same_hits_as_the_memory_provider(cluster: TemporaryCluster, schema_name: str, seed: int) -> None:
    writes, queries = _random_store(seed)
    memory_provider = MemoryProvider()
    memory = memvault.Vault(
        memory_provider,
        name="memory",
        capabilities=memory_provider.capabilities,
        embedder=ConceptEmbedder(),
        background_embedding=False,
    )
    postgres = _vault(cluster, schema_name)
    try:
        for i, request in enumerate(writes):
            for v in (memory, postgres):
                v.retain(request)
            if i == 20:
                memory.embed_pending()
                postgres.embed_pending()
        for embedded in (False, True):
            if embedded:
                memory.embed_pending()
                postgres.embed_pending()
            for query in queries:
                for agent in ("a1", "a2"):
                    request = memvault.RecallRequest(workspace_id="w1", agent_id=agent, query=query, limit=8)
                    assert postgres.recall(request).hits == memory.recall(request).hits, (query, agent, embedded)
    finally:
        postgres.close()
        memory.close()
