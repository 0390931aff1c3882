"""``SuiteBase.find`` over a provider whose recall is ranked by meaning at its other end (issue 36).

A memory service with an embedder fuses meaning into its recalls whatever the client vault says, so a line
sharing no term with the query may come back (P36). The suite learns that from the provider
(``recall_embedder()``, which ``http-remote`` answers from the service) and holds each such hit to P36 before
leaving it out; a provider that does not say so keeps the strict by-words checks, hit for hit.

The "service" here is the memory provider with a recall that adds the hits a service by meaning would add
(or a broken one would), so each case is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs
import pytest

import memvault
from memvault.hooks.markers import hookimpl
from memvault.providers.memory import MemoryProvider
from memvault_parity.base import SuiteBase
from memvault_parity.vectors import ConceptEmbedder

WS = "parity-find"
Extra = Callable[[memvault.RecallRequest], list[memvault.RecallSnippet]]


class AddsHits(MemoryProvider):
    """The memory provider; its recall also returns ``extra(request)``, and it says which embedder ranks it."""

    def __init__(self, extra: Extra, embedder: tuple[str, str] | None) -> None:
        super().__init__()
        self.extra = extra
        self.embedder = embedder

    def recall_embedder(self) -> tuple[str, str] | None:
        return self.embedder

    @hookimpl
    def memvault_recall(self, request: memvault.RecallRequest) -> memvault.RecallResult:
        result = super().memvault_recall(request)
        return attrs.evolve(result, hits=[*result.hits, *self.extra(request)])


def meaning_hit(
    source: str = "AGENT.md",
    line: int = 2,
    snippet: str = "Enjoys gardening on weekends.",
    *,
    score: float = 0.05,
    similarity: float | None = 0.4,
) -> memvault.RecallSnippet:
    """A hit found by meaning alone, as a fused recall returns it (P39: ``lexical`` 0)."""
    return memvault.RecallSnippet(
        source=source, line=line, snippet=snippet, score=score, lexical=0.0, similarity=similarity
    )


@pytest.fixture
def vault_with() -> Iterator[Callable[..., memvault.Vault]]:
    opened: list[memvault.Vault] = []

    def opener(extra: Extra, embedder: tuple[str, str] | None = ("upstream-model", "upstream-1")) -> memvault.Vault:
        vault = memvault.Vault(AddsHits(extra, embedder), name="memory", capabilities=MemoryProvider.capabilities)
        opened.append(vault)
        SuiteBase.put(vault, WS, "Owns a Subaru.\nEnjoys gardening on weekends.\n")
        SuiteBase.put(vault, WS, "Pinned: the ferry leaves at nine.\n", tier="pins")
        return vault

    yield opener
    for vault in opened:
        vault.close()


def test_a_hit_found_by_meaning_alone_is_checked_and_left_out(vault_with: Callable[..., memvault.Vault]) -> None:
    vault = vault_with(lambda request: [meaning_hit(), meaning_hit("pins.md", 1, "Pinned: the ferry leaves at nine.")])
    assert SuiteBase.recall_embedder(vault) == "upstream-model (upstream-1)"
    assert [(h.source, h.line) for h in SuiteBase.find(vault, WS, "subaru")] == [("AGENT.md", 1)]
    assert SuiteBase.find(vault, WS, "automobile") == []


def test_a_provider_that_does_not_say_it_ranks_by_meaning_gets_every_hit(
    vault_with: Callable[..., memvault.Vault],
) -> None:
    """By words, nothing is left out: a line sharing no term still fails the tests that say it must not come back."""
    vault = vault_with(lambda request: [meaning_hit()], embedder=None)
    assert SuiteBase.recall_embedder(vault) is None
    assert [(h.source, h.line) for h in SuiteBase.find(vault, WS, "automobile")] == [("AGENT.md", 2)]


def test_a_vault_with_its_own_embedder_gets_every_hit() -> None:
    """The vector tests' vaults recall by meaning on purpose: their hits found by meaning are what they check."""
    with memvault.open("memory", embedder=ConceptEmbedder(), background_embedding=False) as vault:
        SuiteBase.put(vault, WS, "Owns a Subaru.\nEnjoys gardening on weekends.\n")
        vault.embed_pending()
        assert SuiteBase.recall_embedder(vault) == "parity-concepts (parity-concepts-1)"
        [hit] = SuiteBase.find(vault, WS, "automobile")
        assert (hit.line, hit.lexical) == (1, 0.0)


@pytest.mark.parametrize(
    ("hit", "says"),
    [
        (meaning_hit(similarity=0.05), "not above the floor"),
        (meaning_hit(similarity=None), "not above the floor"),
        (meaning_hit(score=0.6), "not in (0, 0.49]"),
        (meaning_hit(snippet="Owns a Subaru and a sedan."), "is not the text of that line"),
        (meaning_hit(line=7), "has no such line"),
        (meaning_hit("peers/gone.md", 1, "Lives in Lyon."), "is not the text of that line"),
        (meaning_hit("CREW.md", 1, "Crew notes."), "a tier the request does not search"),
    ],
    ids=["low-similarity", "no-similarity", "phrase-score", "stale-text", "no-such-line", "gone-document", "crew"],
)
def test_a_hit_found_by_meaning_that_p36_does_not_allow_fails(
    vault_with: Callable[..., memvault.Vault], hit: memvault.RecallSnippet, says: str
) -> None:
    vault = vault_with(lambda request: [hit])
    with pytest.raises(AssertionError) as failed:
        SuiteBase.find(vault, WS, "automobile")
    assert says in str(failed.value)
    assert "found by meaning alone (the recall is ranked with upstream-model (upstream-1))" in str(failed.value)


def test_a_hit_outside_the_searched_tier_fails(vault_with: Callable[..., memvault.Vault]) -> None:
    vault = vault_with(lambda request: [meaning_hit("pins.md", 1, "Pinned: the ferry leaves at nine.")])
    with pytest.raises(AssertionError, match="outside the tier AGENT searched"):
        SuiteBase.find(vault, WS, "automobile", tier="AGENT")


def test_settled_false_checks_without_reading_back(vault_with: Callable[..., memvault.Vault]) -> None:
    """Other threads change the store meanwhile: the hit's text is not read back, its score still checked."""
    vault = vault_with(lambda request: [meaning_hit(snippet="written by another thread")])
    assert SuiteBase.find(vault, WS, "automobile", settled=False) == []
    vault = vault_with(lambda request: [meaning_hit(score=0.7)])
    with pytest.raises(AssertionError, match="P36"):
        SuiteBase.find(vault, WS, "automobile", settled=False)
