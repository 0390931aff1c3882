"""Every first-party provider ranks the same lines the same way.

memory and local-disk rank with ``memvault.search.search``, sqlite (and
postgres) with ``memvault.search.rank_candidates`` over the candidates its index
finds; ``search`` ranks with ``rank_candidates`` too, so for the same documents
and query every provider returns the same hits: sources, lines, scores and
snippets (below sqlite's candidate budget, which no example here reaches).
A provider whose plugin is missing is skipped, never faked.

By words alone (``embedder="off"``), and by words and meaning together with a
deterministic embedder for every provider that declares ``vectors`` (contract P36).
"""

from __future__ import annotations

import contextlib
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import memvault
import memvault.search
from memvault.contract.models import Capability
from memvault.registry import get_registry, reset_registry
from memvault_parity.vectors import ConceptEmbedder

PROVIDERS = ("memory", "sqlite", "local-disk")

#: Words that make every rule of the ranking fire: stop words, a speaker name beginning
#: many lines (a label), stems ("walks", "walking"), a word twice in a row, non-ASCII words,
#: a month name and a year (the date signal).
WORDS = (
    "ann:",
    "bob:",
    "the",
    "a",
    "of",
    "walks",
    "walking",
    "walked",
    "river",
    "garden",
    "music",
    "very very",
    "café",
    "naïve",
    "march",
    "2024",
    "what",
    "kind",
    "paint",
    "painting",
    "dog",
    "tokyo",
    "trip",
)
LINES = st.lists(st.sampled_from(WORDS), min_size=1, max_size=9).map(" ".join)
DOCUMENTS = st.lists(
    st.tuples(
        st.sampled_from(
            (
                ("daily", "2024-03-01"),
                ("daily", "2024-03-02"),
                ("daily", "2024-04-07"),
                ("pins", "notes"),
                ("peers", "bob"),
                ("AGENT", ""),
                ("PERSONA", ""),
            )
        ),
        st.lists(st.one_of(LINES, st.just("")), min_size=1, max_size=14),
    ),
    min_size=1,
    max_size=6,
)
QUERIES = st.one_of(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
    st.sampled_from(("what did Ann paint in March 2024?", "the walks by the river", "Café?", "very")),
)


def _settings(name: str, tmp: Path) -> dict[str, Any]:
    registry = get_registry()
    if name not in registry.names():
        pytest.skip(f"provider {name!r} is not installed (pip install ./plugins/{name})")
    info = registry.get(name)
    assert info.scratch is not None
    return {**info.scratch(tmp), "scanner": "off"}


@contextlib.contextmanager
def _vaults(embedder: ConceptEmbedder | None = None) -> Iterator[dict[str, memvault.Vault]]:
    """A vault per provider: by words alone, or with ``embedder`` (embedding only when asked) for
    the providers declaring ``vectors`` (the others are left out)."""
    reset_registry()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        vaults = {}
        for name in PROVIDERS:
            folder = Path(tmp) / name
            folder.mkdir()
            settings_ = _settings(name, folder)
            if embedder is None:
                vaults[name] = stack.enter_context(memvault.open(name, embedder="off", **settings_))
            elif Capability.VECTORS in get_registry().get(name).capabilities:
                vaults[name] = stack.enter_context(
                    memvault.open(name, embedder=embedder, background_embedding=False, **settings_)
                )
        yield vaults


def _hits(vault: memvault.Vault, query: str, limit: int) -> list[tuple[str, int, float, str]]:
    result = vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a", query=query, limit=limit))
    return [(hit.source, hit.line, hit.score, hit.snippet) for hit in result.hits]


def _write(vaults: dict[str, memvault.Vault], tier: str, key: str, body: str, mode: str) -> None:
    for vault in vaults.values():
        vault.retain(
            memvault.RetainRequest(workspace_id="w", agent_id="a", tier=tier, key=key, content=body, mode=mode)
        )


def _same_as_sqlite(vaults: dict[str, memvault.Vault], query: str, limit: int) -> list[tuple[str, int, float, str]]:
    """sqlite's hits for ``query``, after checking that the other providers return the same."""
    expected = _hits(vaults["sqlite"], query, limit)
    for name in ("memory", "local-disk"):
        assert _hits(vaults[name], query, limit) == expected, f"{name} ranks {query!r} unlike sqlite"
    return expected


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=DOCUMENTS, queries=st.lists(QUERIES, min_size=1, max_size=4), limit=st.sampled_from((1, 5, 50)))
def test_every_provider_returns_the_same_hits(
    documents: list[tuple[tuple[str, str], list[str]]], queries: list[str], limit: int
) -> None:
    with _vaults() as vaults:
        for (tier, key), lines in documents:
            _write(vaults, tier, key, "".join(f"{line}\n" for line in lines), "append")
        for query in queries:
            _same_as_sqlite(vaults, query, limit)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    documents=DOCUMENTS,
    replaced=st.lists(LINES, min_size=1, max_size=3),
    queries=st.lists(QUERIES, min_size=1, max_size=4),
    limit=st.sampled_from((1, 5, 50)),
)
# Found by CI: a replace that keeps a line word for word kept its vector in sqlite and dropped it in memory.
@example(documents=[(("pins", "notes"), ["ann:"])], replaced=["ann:"], queries=["ann:"], limit=1)
def test_every_provider_with_vectors_returns_the_same_hits_by_meaning(
    documents: list[tuple[tuple[str, str], list[str]]], replaced: list[str], queries: list[str], limit: int
) -> None:
    """P36: the same store, embedded by the same model, gives the same fused hits, parts included;
    also after a replace made some lines wait for their vectors again."""
    with _vaults(ConceptEmbedder()) as vaults:
        assert {"memory", "sqlite"} <= set(vaults)
        for (tier, key), lines in documents:
            _write(vaults, tier, key, "".join(f"{line}\n" for line in lines), "append")
        for vault in vaults.values():
            vault.embed_pending()
        _write(vaults, "pins", "notes", "".join(f"{line}\n" for line in replaced), "replace")
        for query in queries:
            expected = _fused_hits(vaults["memory"], query, limit)
            for name, vault in vaults.items():
                assert _fused_hits(vault, query, limit) == expected, f"{name} ranks {query!r} unlike memory"


def _fused_hits(vault: memvault.Vault, query: str, limit: int) -> list[tuple[Any, ...]]:
    result = vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a", query=query, limit=limit))
    return [(h.source, h.line, h.score, h.snippet, h.lexical, h.similarity, h.digest) for h in result.hits]


def test_the_same_hits_on_locomo_like_turns() -> None:
    """A conversation of speaker-labelled turns on daily documents: the shape the ranking was tuned on."""
    turns = [
        "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
        "Melanie: That sounds amazing! What kind of support group was it?",
        "Caroline: A transgender support group. I've been thinking about counseling as a career.",
        "Melanie: I'm painting a sunrise over the lake these days, it calms me down.",
        "Caroline: Painting sounds lovely. I ran a charity race for mental health last Saturday.",
        "Melanie: We went camping at the beach with the kids in June.",
    ]
    with _vaults() as vaults:
        for day in range(1, 8):
            body = "".join(f"{turns[(day * 5 + i) % len(turns)]}\n" for i in range(12))
            _write(vaults, "daily", f"2023-05-{day:02d}", body, "replace")
        for query in (
            "What did Caroline research?",
            "When did Melanie paint a sunrise?",
            "What kind of support group did Caroline go to on 3 May 2023?",
            "camping beach",
        ):
            assert _same_as_sqlite(vaults, query, 10)


def test_the_same_hits_above_the_candidate_budget() -> None:
    """More than CANDIDATE_BUDGET lines share a query term: every provider ranks the same narrower subset."""
    rng = random.Random(5)
    words = ["apple", "river", "garden", "music", "walks"] + [f"w{i}" for i in range(40)]
    weights = [30, 20, 12, 8, 6] + [1] * 40
    assert memvault.search.CANDIDATE_BUDGET == 1000
    with _vaults() as vaults:
        for day in range(1, 9):
            body = "".join(f"Ann: {' '.join(rng.choices(words, weights, k=rng.randint(3, 12)))}\n" for _ in range(250))
            body += "Ann: the narwhal swam by the river\n" if day % 3 == 0 else ""
            _write(vaults, "daily", f"2024-03-{day:02d}", body, "replace")
        for query in ("apple river garden", "apple river garden music walks", "narwhal river apple", "river apple"):
            assert len(_same_as_sqlite(vaults, query, 20)) == 20
