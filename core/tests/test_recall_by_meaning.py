"""Recall by meaning in the core (contract P36-P40): the embedder registry, a vault's
background embedding, and the memory provider's vectors, with a small deterministic
embedder (the real default model is tested in plugins/embed-minilm and the parity suite)."""

from __future__ import annotations

import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import importlib_metadata
import numpy as np
import pytest

import memvault
from memvault import search
from memvault.contract.embedding import QueryVector, vector_bytes, vectors_from_bytes
from memvault.contract.errors import InvalidRequest, PluginError
from memvault.contract.wire import structure, unstructure
from memvault.providers.memory import MemoryProvider
from memvault.registry import Registry

#: Words that mean the same to the toy embedder: each group is one dimension.
CONCEPTS = (
    {"car", "vehicle", "subaru", "drives", "drive", "automobile"},
    {"peanuts", "peanut", "nut", "allergic", "allergy"},
    {"dog", "puppy", "labrador", "pet"},
)


class ConceptEmbedder:
    """Bag of words over 64 dimensions, where the words of one concept share a dimension."""

    name = "concepts"
    dimensions = 64

    def __init__(self, model_id: str = "concepts-1") -> None:
        self.model_id = model_id
        self.calls = 0
        self.lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self.lock:
            self.calls += 1
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in "".join(c if c.isalnum() else " " for c in text.lower()).split():
                concept = next((i for i, words in enumerate(CONCEPTS) if word in words), None)
                column = concept if concept is not None else 3 + sum(map(ord, word)) % (self.dimensions - 3)
                out[row, column] += 1.0
            if not out[row].any():
                out[row, -1] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _vault(embedder: ConceptEmbedder | None = None, *, background: bool = False) -> memvault.Vault:
    provider = MemoryProvider()
    return memvault.Vault(
        provider,
        name="memory",
        capabilities=provider.capabilities,
        embedder=embedder or ConceptEmbedder(),
        background_embedding=background,
    )


def _retain(vault: memvault.Vault, content: str, *, agent: str = "a1", tier: str = "AGENT", **kw: str) -> None:
    mode = kw.pop("mode", "append")
    vault.retain(memvault.RetainRequest(workspace_id="w1", agent_id=agent, tier=tier, content=content, mode=mode, **kw))


def _recall(vault: memvault.Vault, query: str, *, agent: str = "a1", **kw: object) -> list[memvault.RecallSnippet]:
    return vault.recall(memvault.RecallRequest(workspace_id="w1", agent_id=agent, query=query, **kw)).hits  # type: ignore[arg-type]


FACTS = "Drives a 2019 Subaru Outback, dark green.\nThe user is allergic to peanuts.\nWorks from Lisbon on Fridays.\n"


# -- the vault and the memory provider --------------------------------------------------


def test_p36_a_question_in_other_words_finds_the_fact_once_embedded() -> None:
    vault = _vault()
    _retain(vault, FACTS)
    assert _recall(vault, "Which automobile?") == []  # no shared word, nothing embedded yet
    report = vault.embed_pending()
    assert report is not None
    assert (report.embedded, report.backlog) == (3, 0)
    [hit, *_] = _recall(vault, "Which automobile?")
    assert (hit.source, hit.line) == ("AGENT.md", 1)
    assert hit.lexical == 0.0
    assert hit.similarity is not None
    assert hit.similarity > 0.3


def test_p37_a_recall_right_after_a_retain_finds_the_new_line_by_its_words() -> None:
    vault = _vault()
    _retain(vault, FACTS)
    hits = _recall(vault, "peanuts")
    assert [(h.source, h.line) for h in hits] == [("AGENT.md", 2)]
    assert vault.embedding_backlog() == 3


def test_p37_the_background_worker_embeds_new_lines_without_being_asked() -> None:
    vault = _vault(background=True)
    try:
        _retain(vault, FACTS)
        deadline = time.monotonic() + 10
        while vault.embedding_backlog() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert vault.embedding_backlog() == 0
        assert vault.health().embedding_backlog == 0
        assert _recall(vault, "Which automobile?")[0].line == 1
    finally:
        vault.close()


def test_p37_health_reports_the_backlog() -> None:
    vault = _vault()
    _retain(vault, FACTS)
    status = vault.health()
    assert status.ok
    assert status.embedding_backlog == 3
    assert unstructure(status)["embedding_backlog"] == 3
    vault.embed_pending()
    assert "embedding_backlog" not in unstructure(vault.health())


def test_p38_vectors_never_cross_partitions() -> None:
    vault = _vault()
    _retain(vault, FACTS, agent="a1")
    _retain(vault, "Rides a bicycle.\n", agent="a2")
    vault.embed_pending()
    assert all(
        hit.snippet != "Drives a 2019 Subaru Outback, dark green." for hit in _recall(vault, "vehicle", agent="a2")
    )
    assert _recall(vault, "vehicle", agent="a2", tier="AGENT") == []


def test_p38_vectors_of_another_model_are_never_compared() -> None:
    provider = MemoryProvider()
    old = memvault.Vault(provider, name="memory", capabilities=provider.capabilities, embedder=ConceptEmbedder("v1"))
    _retain(old, FACTS)
    old.embed_pending()
    new = memvault.Vault(
        provider,
        name="memory",
        capabilities=provider.capabilities,
        embedder=ConceptEmbedder("v2"),
        background_embedding=False,
    )
    assert new.embedding_backlog() == 3  # a changed model is detected: every line waits again
    assert _recall(new, "Which automobile?") == []  # never ranked with v1's vectors
    new.embed_pending()
    assert _recall(new, "Which automobile?")[0].line == 1


def test_p37_replace_leaves_no_stale_vector_answering() -> None:
    vault = _vault()
    _retain(vault, "Drives a Subaru.\n", mode="replace")
    vault.embed_pending()
    _retain(vault, "Takes the train everywhere.\n", mode="replace")
    hits = _recall(vault, "automobile")
    assert all("Subaru" not in hit.snippet for hit in hits)
    assert vault.embedding_backlog() == 1


def test_p37_an_append_keeps_the_vectors_of_unchanged_lines() -> None:
    vault = _vault()
    _retain(vault, FACTS)
    vault.embed_pending()
    _retain(vault, "Has a labrador.\n")
    assert vault.embedding_backlog() == 1
    assert _recall(vault, "Which automobile?")[0].line == 1  # still found by meaning before re-embedding


def test_p37_an_append_to_an_unfinished_last_line_re_embeds_it() -> None:
    vault = _vault()
    _retain(vault, "Owns a labrador")
    vault.embed_pending()
    _retain(vault, " and drives a Subaru.\n")
    assert vault.embedding_backlog() == 1
    vault.embed_pending()
    [hit] = [h for h in _recall(vault, "automobile") if h.line == 1]
    assert hit.snippet == "Owns a labrador and drives a Subaru."


@pytest.mark.parametrize("how", ["id", "subject"])
def test_p40_forget_removes_the_vectors(how: str) -> None:
    vault = _vault()
    _retain(vault, FACTS, data_subject_id="alice")
    vault.embed_pending()
    if how == "id":
        vault.forget(memvault.ForgetRequest(workspace_id="w1", agent_id="a1", id="AGENT.md"))
    else:
        vault.forget(memvault.ForgetRequest(workspace_id="w1", data_subject_id="alice"))
    assert _recall(vault, "Which automobile?") == []
    # A new document at the same label starts without the old one's vectors.
    _retain(vault, "Something else entirely.\n")
    assert vault.embedding_backlog() == 1


def test_p36_a_phrase_line_still_ranks_above_lines_found_by_meaning() -> None:
    vault = _vault()
    _retain(vault, "Drives a Subaru.\nbought a new car last week\n")
    vault.embed_pending()
    [first, second] = _recall(vault, "bought a new car")
    assert first.line == 2
    assert first.score > search.PHRASE_FLOOR
    assert second.score <= search.TERM_CEILING


def test_p39_hits_carry_their_lexical_and_meaning_parts() -> None:
    vault = _vault()
    _retain(vault, FACTS)
    vault.embed_pending()
    for hit in _recall(vault, "Does she drive?"):
        assert hit.lexical is not None
        assert hit.similarity is not None
    _retain(vault, "Drives to work.\n")  # not embedded yet: its similarity is unknown
    [fresh] = [h for h in _recall(vault, "Drives to work") if h.line == 4]
    assert fresh.similarity is None


def test_p36_without_an_embedder_recall_is_by_words_only() -> None:
    provider = MemoryProvider()
    vault = memvault.Vault(provider, name="memory", capabilities=provider.capabilities)
    _retain(vault, FACTS)
    assert vault.embedder is None
    assert vault.embed_pending() is None
    assert _recall(vault, "Which automobile?") == []
    assert _recall(vault, "peanuts")[0].lexical is None


def test_p36_the_query_vector_never_crosses_the_wire() -> None:
    vector = QueryVector(model_id="m", values=np.array([0.6, 0.8], dtype=np.float32))
    request = memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="q", vector=vector)
    assert "vector" not in unstructure(request)
    with pytest.raises(InvalidRequest):
        structure(
            {"workspace_id": "w1", "agent_id": "a1", "query": "q", "vector": {"model_id": "m", "values": [1.0]}},
            memvault.RecallRequest,
        )


def test_p36_a_query_vector_must_be_a_unit_float32_vector() -> None:
    with pytest.raises(InvalidRequest, match="unit length"):
        QueryVector(model_id="m", values=np.array([1.0, 1.0], dtype=np.float32))
    with pytest.raises(InvalidRequest, match="float32"):
        QueryVector(model_id="m", values=np.array([1.0, 0.0]))
    with pytest.raises(InvalidRequest, match="model_id"):
        QueryVector(model_id="", values=np.array([1.0, 0.0], dtype=np.float32))


def test_p37_a_provider_declaring_vectors_must_implement_the_vector_hooks() -> None:
    class Lexical(MemoryProvider):
        memvault_vectors_pending = None  # type: ignore[assignment]
        memvault_vectors_store = None  # type: ignore[assignment]
        memvault_vectors_backlog = None  # type: ignore[assignment]

    with pytest.raises(PluginError, match="memvault_vectors_pending"):
        memvault.Vault(Lexical(), name="lex", capabilities={"vectors"}, embedder=ConceptEmbedder())


def test_p37_a_store_for_a_line_that_changed_since_stores_nothing() -> None:
    provider = MemoryProvider()
    _vault_on = memvault.Vault(provider, name="memory", capabilities=provider.capabilities)
    _retain(_vault_on, "Drives a Subaru.\n", mode="replace")
    [pending] = provider.memvault_vectors_pending(model_id="m", limit=10)
    _retain(_vault_on, "Walks everywhere.\n", mode="replace")
    vector = vector_bytes(np.ones(4, dtype=np.float32) / 2)
    assert provider.memvault_vectors_store(model_id="m", vectors=[(pending.key, vector)]) == 0
    assert provider.memvault_vectors_backlog(model_id="m") == 1


def test_p37_an_embedder_that_fails_leaves_the_lines_pending_and_recall_working() -> None:
    class Broken(ConceptEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            if len(texts) > 1:
                raise RuntimeError("out of memory")
            return super().embed(texts)

    vault = _vault(Broken())
    _retain(vault, FACTS)
    with pytest.raises(PluginError, match="out of memory"):
        vault.embed_pending()
    assert vault.embedding_backlog() == 3
    assert _recall(vault, "peanuts")[0].line == 2


def test_vectors_round_trip_as_float16() -> None:
    values = np.array([0.6, -0.8, 0.0], dtype=np.float32)
    blob = vector_bytes(values)
    assert len(blob) == 6
    np.testing.assert_allclose(vectors_from_bytes([blob, blob], 3), np.stack([values, values]), atol=1e-3)
    with pytest.raises(ValueError, match="expected 6"):
        vectors_from_bytes([blob[:4]], 3)


def test_fuse_orders_ties_by_label_and_line_and_keeps_phrase_scores() -> None:
    query = search.Query.parse("green car")
    phrase = memvault.RecallSnippet(source="b.md", line=3, snippet="a green car", score=0.9)
    similar = {("b.md", 3): 0.1, ("a.md", 2): 0.6, ("a.md", 1): 0.6}
    hits = search.fuse(query, [phrase], similar, lambda refs: {r: ("text", "d") for r in refs}, 5)
    assert [(h.source, h.line) for h in hits] == [("b.md", 3), ("a.md", 1), ("a.md", 2)]
    assert hits[0].score == 0.9
    assert hits[1].score == hits[2].score <= search.TERM_CEILING


# -- the embedder registry ------------------------------------------------------------------

_EMBEDDER_PLUGIN = """
import numpy as np
import memvault


class Toy:
    name = "{name}"
    model_id = "toy-1"
    dimensions = 2

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def embed(self, texts):
        return np.tile(np.array([0.6, 0.8], dtype=np.float32), (len(texts), 1))


@memvault.hookimpl
def memvault_register_embedders(register):
    register("{name}", {factory}, description="a toy")
"""


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for mod in [m for m in sys.modules if m.startswith("fakeembed_")]:
        del sys.modules[mod]


def _embedder_plugin(folder: Path, module: str, name: str, factory: str = "Toy") -> importlib_metadata.EntryPoint:
    (folder / f"{module}.py").write_text(textwrap.dedent(_EMBEDDER_PLUGIN.format(name=name, factory=factory)))
    return importlib_metadata.EntryPoint(name=module, value=module, group="memvault")


def test_p36_memvault_register_embedders_registers_an_embedder_shared_per_process(plugin_dir: Path) -> None:
    registry = Registry(entry_points=[_embedder_plugin(plugin_dir, "fakeembed_a", "toy")])
    assert set(registry.embedders) == {"toy"}
    first = registry.embedder("auto")
    assert first is not None
    assert first.model_id == "toy-1"
    assert registry.embedder("toy") is first
    assert registry.embedder("toy", {"scale": 2.0}) is not first
    assert registry.embedder("off") is None


def test_p36_no_embedder_installed_means_recall_by_words() -> None:
    assert Registry(entry_points=[], load=[]).embedder("auto") is None


def test_p36_several_embedders_need_a_choice(plugin_dir: Path) -> None:
    registry = Registry(
        entry_points=[
            _embedder_plugin(plugin_dir, "fakeembed_a", "one"),
            _embedder_plugin(plugin_dir, "fakeembed_b", "two"),
        ]
    )
    with pytest.raises(PluginError, match=r"several embedders are installed \(one, two\)"):
        registry.embedder("auto")
    assert registry.embedder("two") is not None


def test_p36_an_unknown_embedder_or_setting_is_named(plugin_dir: Path) -> None:
    registry = Registry(entry_points=[_embedder_plugin(plugin_dir, "fakeembed_a", "toy")])
    with pytest.raises(PluginError, match="no embedder named 'tyo'.*known embedders: toy"):
        registry.embedder("tyo")
    with pytest.raises(InvalidRequest, match="takes no setting 'sclae'"):
        registry.embedder("toy", {"sclae": 1})


def test_p36_a_duplicate_embedder_name_fails_the_second_plugin(plugin_dir: Path) -> None:
    registry = Registry(
        entry_points=[
            _embedder_plugin(plugin_dir, "fakeembed_a", "toy"),
            _embedder_plugin(plugin_dir, "fakeembed_b", "toy"),
        ]
    )
    [failure] = registry.failures
    assert "registered by both plugins" in failure.cause
    assert registry.embedders["toy"][0] == "fakeembed_a"


def test_p36_an_object_that_is_not_an_embedder_is_refused(plugin_dir: Path) -> None:
    registry = Registry(entry_points=[_embedder_plugin(plugin_dir, "fakeembed_a", "toy", factory="object")])
    with pytest.raises(PluginError, match="not a memvault.Embedder"):
        registry.embedder("toy")


def test_p36_a_failing_embedder_leaves_recall_by_words_working(caplog: pytest.LogCaptureFixture) -> None:
    class Down(ConceptEmbedder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            raise RuntimeError("the model file went away")

    vault = _vault(Down())
    _retain(vault, FACTS)
    with caplog.at_level("WARNING", logger="memvault.vault"):
        [hit] = _recall(vault, "peanuts")
    assert hit.line == 2
    assert hit.lexical is None  # ranked by words alone
    assert "the model file went away" in caplog.text
