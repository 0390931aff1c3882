"""Recall by meaning (contract P36-P40): for providers declaring the capability ``vectors``.

Most tests use :class:`ConceptEmbedder`, a small deterministic embedder in which the
words of one concept share a dimension, so what a vector search must find (and must
not) is exact. The paraphrase test uses the installed default embedder (the real
model) and is skipped, saying so, where none is installed.

A vault here embeds on demand (``background_embedding=False`` and
``vault.embed_pending()``), so each test sees exactly the state it wrote.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

import memvault
from memvault.contract.embedding import Embedder, vector_bytes
from memvault.contract.models import Capability
from memvault_parity.base import SuiteBase, requires

__all__ = ["PARAPHRASES", "ConceptEmbedder", "VectorTests"]

#: Words that mean the same to :class:`ConceptEmbedder`: each group is one dimension.
CONCEPTS: tuple[frozenset[str], ...] = (
    frozenset({"car", "vehicle", "subaru", "drives", "drive", "automobile", "sedan"}),
    frozenset({"peanuts", "peanut", "nut", "nuts", "allergic", "allergy"}),
    frozenset({"dog", "puppy", "labrador", "pet", "hound"}),
    frozenset({"violin", "cello", "instrument", "orchestra"}),
)


class ConceptEmbedder:
    """A deterministic embedder for tests: a bag of words over 64 dimensions, where the words
    of one concept (:data:`CONCEPTS`) share a dimension and any other word hashes to one of
    the others. Thread-safe. ``model_id`` is settable, to test a change of model."""

    name = "parity-concepts"
    dimensions = 64

    def __init__(self, model_id: str = "parity-concepts-1") -> None:
        self.model_id = model_id
        self.texts = 0
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        with self._lock:
            self.texts += len(texts)
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in "".join(c if c.isalnum() else " " for c in text.lower()).split():
                concept = next((i for i, words in enumerate(CONCEPTS) if word in words), None)
                column = concept if concept is not None else len(CONCEPTS) + sum(map(ord, word)) % 59
                out[row, column] += 1.0
            if not out[row].any():
                out[row, -1] = 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


#: Fact and question pairs sharing no content word, for the paraphrase test with the real model.
PARAPHRASES: tuple[tuple[str, str], ...] = (
    ("The user is allergic to peanuts and carries an epinephrine pen.", "Which nut reaction should the cook know?"),
    ("Drives a 2019 Subaru Outback, dark green.", "What vehicle does she own?"),
    ("Her daughter Maya starts kindergarten in September.", "When does the child begin school?"),
    ("Prefers meetings before 10am, never on Fridays.", "What time of day suits appointments best?"),
    ("Plays cello in a community orchestra on Tuesdays.", "Which instrument does she practise weekly?"),
    ("Is vegetarian but eats fish occasionally.", "Does she avoid meat?"),
    ("Moved from Toronto to Lisbon in 2021.", "Which city did she relocate to?"),
    ("Her passport expires in March 2027.", "When is the travel document no longer valid?"),
    ("Works as a nurse on night shifts at the county hospital.", "What is her job?"),
    ("Is learning Japanese with a tutor twice a week.", "Which language lessons is she taking?"),
    ("Has a golden retriever named Biscuit.", "What pet lives with them?"),
    ("Her blood type is O negative.", "Which group would a transfusion need?"),
    ("Runs a marathon every April in Boston.", "Which long race does she compete in each spring?"),
    ("The project deadline moved to the end of June.", "When is the work now due?"),
    ("Uses a standing desk and a split keyboard.", "What office furniture setup suits her?"),
    ("Is afraid of flying and prefers trains.", "How does she like to travel long distances?"),
    ("Takes ibuprofen for recurring migraines.", "What medicine helps her headaches?"),
    ("Her brother lives in Melbourne with his wife.", "Where is her sibling based?"),
    ("Keeps the spare house key under the blue flowerpot.", "Where is the extra door key hidden?"),
    ("Wants a small wedding on a beach in Portugal next summer.", "What kind of marriage ceremony is planned?"),
)


class VectorTests(SuiteBase):
    """P36-P40: lines found by meaning, within their partitions, never stale, erased with their text."""

    def make_vault_with_embedder(self, settings: Mapping[str, Any], embedder: Embedder) -> memvault.Vault:
        """Open the provider with ``embedder``, embedding only on demand. Override it together with
        ``make_vault`` when your test class wraps an unregistered provider instance."""
        return memvault.open(self._provider_name(), embedder=embedder, background_embedding=False, **settings)

    @pytest.fixture
    def meaning_vault(self, settings: Mapping[str, Any]) -> Iterator[Callable[[Embedder], memvault.Vault]]:
        opened: list[memvault.Vault] = []

        def opener(embedder: Embedder) -> memvault.Vault:
            vault = self.make_vault_with_embedder(settings, embedder)
            opened.append(vault)
            return vault

        yield opener
        for vault in reversed(opened):
            vault.close()

    @staticmethod
    def embed_all(vault: memvault.Vault) -> None:
        report = vault.embed_pending(timeout=120)
        assert report is not None, "P36: a vault given an embedder recalls by meaning"
        assert report.backlog == 0, f"P37: {report.backlog} lines still pending after embedding everything"

    # -- finding by meaning ------------------------------------------------------------

    @requires(Capability.VECTORS)
    def test_p36_a_line_sharing_no_word_is_found_by_meaning(self, meaning_vault: Any, ws: str) -> None:
        """P36/P39: once embedded, a line sharing no word with the query is found, scoring under 0.5, with its parts."""
        vault = meaning_vault(ConceptEmbedder())
        self.put(vault, ws, "Owns a Subaru.\nEnjoys gardening on weekends.\n")
        self.embed_all(vault)
        [hit, *_] = self.find(vault, ws, "which automobile")
        assert (hit.source, hit.line) == ("AGENT.md", 1)
        assert 0.0 < hit.score <= 0.49, "P36: a line found by meaning alone scores below phrase lines"
        assert hit.lexical == 0.0
        assert hit.similarity is not None

    @requires(Capability.VECTORS)
    def test_p37_a_new_line_is_found_by_its_words_before_it_is_embedded(self, meaning_vault: Any, ws: str) -> None:
        """P37/P39: a retain waits for no embedder; the new line is pending, counted, and found by its words."""
        vault = meaning_vault(ConceptEmbedder())
        self.put(vault, ws, "Owns a Subaru.\n")
        assert vault.embedding_backlog() == 1
        assert vault.health().embedding_backlog == 1
        [hit] = self.find(vault, ws, "Subaru")
        assert hit.line == 1
        assert hit.similarity is None, "P39: a line not embedded yet has no similarity"

    @requires(Capability.VECTORS)
    def test_p36_a_phrase_line_ranks_above_lines_found_by_meaning(self, meaning_vault: Any, ws: str) -> None:
        """P36: a line holding the query's phrase keeps its score, above every line found by meaning."""
        vault = meaning_vault(ConceptEmbedder())
        self.put(vault, ws, "Drives a sedan.\nbought a new car last week\n")
        self.embed_all(vault)
        hits = self.find(vault, ws, "bought a new car")
        assert [h.line for h in hits][:2] == [2, 1]
        assert hits[0].score > 0.5 >= hits[1].score

    @requires(Capability.VECTORS)
    def test_p36_the_fused_ranking_is_the_reference_ranking(self, meaning_vault: Any, ws: str) -> None:
        """P36: every provider ranks a store the same way: here, the memory provider's fused hits."""
        lines = [
            "Drives a Subaru to work.",
            "The dog sleeps on the sofa.",
            "Allergic to peanuts since childhood.",
            "Plays the cello on Sundays.",
            "Bought a sedan in 2020 and a car seat.",
            "Her puppy chews shoes.",
            "Reads history books about cars and trains.",
        ]
        body = "\n".join(lines) + "\n"
        embedder = ConceptEmbedder()
        vault = meaning_vault(embedder)
        self.put(vault, ws, body)
        self.put(vault, ws, "Walks the labrador at dawn.\n", tier="daily", key="2024-05-01")
        self.embed_all(vault)
        reference = memvault.open("memory", embedder=embedder, background_embedding=False)
        try:
            self.put(reference, ws, body)
            self.put(reference, ws, "Walks the labrador at dawn.\n", tier="daily", key="2024-05-01")
            self.embed_all(reference)
            for query in ("automobile", "a pet at home", "nut allergy", "car trains", "orchestra instrument"):
                got = [(h.source, h.line, h.score) for h in self.find(vault, ws, query, limit=5)]
                want = [(h.source, h.line, h.score) for h in self.find(reference, ws, query, limit=5)]
                assert got == want, f"P36: {query!r} ranked differently from the reference"
        finally:
            reference.close()

    # -- partitions ------------------------------------------------------------------------

    @requires(Capability.VECTORS)
    def test_p38_a_vector_search_never_crosses_partitions(self, meaning_vault: Any, ws: str) -> None:
        """P38: other partitions hold many lines closer in meaning: a global nearest-neighbour search
        filtered afterwards would find none of this partition's lines."""
        vault = meaning_vault(ConceptEmbedder())
        other = self.new_workspace()
        closer = "".join("Vehicle automobile car sedan drive.\n" for _ in range(60))
        self.put(vault, other, closer)
        self.put(vault, ws, closer, agent="agent-2")
        self.put(vault, ws, closer, tier="CREW")
        self.put(vault, ws, "Notes about a Subaru in the garage.\n")
        self.put(vault, ws, "Owns a sedan.\n", tier="pins")
        self.embed_all(vault)
        hits = self.find(vault, ws, "automobile")
        assert {(h.source, h.line) for h in hits} == {("AGENT.md", 1), ("pins.md", 1)}
        assert [(h.source, h.line) for h in self.find(vault, ws, "automobile", tier="AGENT")] == [("AGENT.md", 1)]
        crew_hits = self.find(vault, ws, "automobile", agent="", crew="crew-1")
        assert {h.source for h in crew_hits} == {"CREW.md"}

    # -- currency -------------------------------------------------------------------------

    @requires(Capability.VECTORS)
    def test_p37_a_replaced_line_leaves_no_stale_vector(self, meaning_vault: Any, ws: str) -> None:
        """P37: after a replace, no vector of the old text answers, before or after re-embedding."""
        vault = meaning_vault(ConceptEmbedder())
        self.put(vault, ws, "Owns a Subaru.\n", mode="replace")
        self.embed_all(vault)
        self.put(vault, ws, "Takes the train everywhere.\n", mode="replace")
        assert self.find(vault, ws, "automobile") == []
        assert vault.embedding_backlog() == 1
        self.embed_all(vault)
        assert self.find(vault, ws, "automobile") == []

    @requires(Capability.VECTORS)
    def test_p37_an_append_keeps_unchanged_lines_embedded(self, meaning_vault: Any, ws: str) -> None:
        """P37: an append keeps the vectors of the lines it does not change; only its new line is pending."""
        vault = meaning_vault(ConceptEmbedder())
        self.put(vault, ws, "Owns a Subaru.\nHas a labrador.\n")
        self.embed_all(vault)
        self.put(vault, ws, "Plays the violin.\n")
        assert vault.embedding_backlog() == 1
        assert self.find(vault, ws, "automobile")[0].line == 1

    @requires(Capability.VECTORS)
    def test_p37_an_append_to_an_unfinished_line_re_embeds_it(self, meaning_vault: Any, ws: str) -> None:
        """P37: an append that continues an unfinished last line makes that line pending again."""
        vault = meaning_vault(ConceptEmbedder())
        self.put(vault, ws, "Owns a cello")
        self.embed_all(vault)
        self.put(vault, ws, " and a Subaru.\n")
        assert vault.embedding_backlog() == 1
        self.embed_all(vault)
        [hit] = [h for h in self.find(vault, ws, "automobile") if h.line == 1]
        assert hit.snippet == "Owns a cello and a Subaru."

    @requires(Capability.VECTORS)
    def test_p37_a_vector_for_a_line_that_changed_meanwhile_is_not_stored(self, meaning_vault: Any, ws: str) -> None:
        """P37: a vector stored for a line that changed since it was named pending is never attached to the new text."""
        vault = meaning_vault(ConceptEmbedder())
        hook = vault.plugin_manager.hook
        self.put(vault, ws, "Owns a Subaru.\n", mode="replace")
        pending = hook.memvault_vectors_pending(model_id="parity-concepts-1", limit=64)
        assert [p.text for p in pending if p.text == "Owns a Subaru."], "P37: the new line is pending"
        self.put(vault, ws, "Walks everywhere.\n", mode="replace")
        stale = ConceptEmbedder().embed(["Owns a Subaru."])[0]
        keys = [(p.key, vector_bytes(stale)) for p in pending if p.text == "Owns a Subaru."]
        hook.memvault_vectors_store(model_id="parity-concepts-1", vectors=keys)
        assert self.find(vault, ws, "automobile") == [], "P37: a vector was attached to text it was not computed from"

    @requires(Capability.VECTORS, Capability.DURABLE)
    def test_p38_a_changed_model_is_detected_and_never_mixed(self, meaning_vault: Any, ws: str) -> None:
        """P38: a vault with another model sees every line pending and never ranks with the first model's vectors."""
        first = meaning_vault(ConceptEmbedder("parity-concepts-1"))
        self.put(first, ws, "Owns a Subaru.\nHas a labrador.\n")
        self.embed_all(first)
        second = meaning_vault(ConceptEmbedder("parity-concepts-2"))
        assert second.embedding_backlog() == 2, "P38: lines embedded by another model wait for this one"
        assert self.find(second, ws, "automobile") == [], "P38: vectors of another model were compared"
        self.embed_all(second)
        assert self.find(second, ws, "automobile")[0].line == 1

    # -- erasure --------------------------------------------------------------------------

    @requires(Capability.VECTORS)
    def test_p40_forget_by_id_removes_the_vectors(self, meaning_vault: Any, ws: str) -> None:
        """P40: forget by id removes the document's vectors; a new document at the label starts with none."""
        vault = meaning_vault(ConceptEmbedder())
        self.put(vault, ws, "Owns a Subaru.\n")
        self.embed_all(vault)
        assert self.drop(vault, ws, label="AGENT.md") == 1
        assert self.find(vault, ws, "automobile") == []
        self.put(vault, ws, "Plays the violin.\n")
        assert vault.embedding_backlog() == 1, "P40: a new document at the label starts with no vectors"
        self.embed_all(vault)
        assert self.find(vault, ws, "automobile") == []

    @requires(Capability.VECTORS, Capability.CASCADE_FORGET)
    def test_p40_erasure_by_subject_removes_the_vectors(self, meaning_vault: Any, ws: str) -> None:
        """P40: erasure by data subject removes the vectors of the documents it removes, and only those."""
        vault = meaning_vault(ConceptEmbedder())
        self.put(vault, ws, "Owns a Subaru.\n", subject="subject-a")
        self.put(vault, ws, "Owns a sedan.\n", tier="pins", subject="subject-b")
        self.embed_all(vault)
        self.drop(vault, ws, subject="subject-a")
        assert [(h.source, h.line) for h in self.find(vault, ws, "automobile")] == [("pins.md", 1)]
        assert vault.embedding_backlog() == 0

    @requires(Capability.VECTORS, Capability.DURABLE)
    def test_p37_the_backlog_survives_reopening(
        self, meaning_vault: Any, open_vault: Callable[[], memvault.Vault], ws: str
    ) -> None:
        """P37: pending lines are durable: a vault opened later finds them, and stored vectors survive reopening."""
        writer = open_vault()
        self.put(writer, ws, "Owns a Subaru.\nHas a labrador.\n")
        writer.close()
        vault = meaning_vault(ConceptEmbedder())
        assert vault.embedding_backlog() == 2
        self.embed_all(vault)
        vault.close()
        again = meaning_vault(ConceptEmbedder())
        assert again.embedding_backlog() == 0, "P37: stored vectors survive reopening"
        assert self.find(again, ws, "automobile")[0].line == 1

    # -- the real model ------------------------------------------------------------------

    @requires(Capability.VECTORS)
    def test_p36_questions_in_other_words_find_their_facts(self, meaning_vault: Any, ws: str) -> None:
        """P36: with the installed embedder, questions sharing no word with their facts find them in the top 5."""
        from memvault.registry import get_registry

        embedder = get_registry().embedder("auto")
        if embedder is None:
            pytest.skip("no embedder is installed (pip install memvault-embed-minilm) to judge meaning with")
        vault = meaning_vault(embedder)
        self.put(vault, ws, "".join(f"{fact}\n" for fact, _ in PARAPHRASES), tier="pins")
        self.embed_all(vault)
        found = 0
        for line, (_, question) in enumerate(PARAPHRASES, start=1):
            found += line in [h.line for h in self.find(vault, ws, question, limit=5)]
        assert found >= 17, f"P36: {found} of {len(PARAPHRASES)} facts in the top 5 for questions in other words"
