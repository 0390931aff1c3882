"""The postgres provider ranks as every other provider does, also above the candidate budget.

Below :data:`memvault.search.CANDIDATE_BUDGET` matching lines it scores them all with
:func:`memvault.search.rank_candidates`; above it the subset
:func:`memvault.search.narrowing` picks, as sqlite and :func:`memvault.search.search`
(the memory provider) do. Compared here with the memory provider on the same documents:
the same hits, scores and snippets.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

import memvault
import memvault.search

SHAPES = [
    "apple river garden music walks",  # common words: the first narrower query that fits
    "apple river",  # a phrase among common words
    "river",  # one common word: no narrower query, the shortest lines
    "narwhal river apple",  # a rare word, no line with all three: the wider query fills the budget
    "narwhal",  # a rare word alone, below the budget
    "w7 w8 w9 w10 w11 w12 w13 w14 w15 w16 w17 w18",  # twelve rare terms: no narrower query exists
    " ".join(f"w{i}" for i in range(24)),  # more terms than a bit mask per line counts
]


@pytest.fixture
def memory() -> Iterator[memvault.Vault]:
    with memvault.open("memory", scanner="off") as vault:
        yield vault


def test_above_the_budget_postgres_returns_the_memory_providers_hits(
    vault: memvault.Vault, memory: memvault.Vault
) -> None:
    rng = random.Random(5)
    words = ["apple", "river", "garden", "music", "walks", *(f"w{i}" for i in range(40))]
    weights = [30, 20, 12, 8, 6, *([1] * 40)]
    for day in range(1, 10):
        lines = [f"Ann: {' '.join(rng.choices(words, weights, k=rng.randint(3, 12)))}" for _ in range(250)]
        if day % 4 == 0:
            lines.append("Ann: we saw a narwhal")
        body = "".join(f"{line}\n" for line in lines)
        for store in (vault, memory):
            store.retain(
                memvault.RetainRequest(
                    workspace_id="w1", agent_id="a", tier="daily", key=f"2024-03-{day:02d}", content=body, mode="append"
                )
            )
    assert memvault.search.CANDIDATE_BUDGET < 2250
    for query in SHAPES:
        request = memvault.RecallRequest(workspace_id="w1", agent_id="a", query=query, limit=20)
        expected = [(h.source, h.line, h.score, h.snippet) for h in memory.recall(request).hits]
        assert len(expected) == (2 if query == "narwhal" else 20)
        got = [(h.source, h.line, h.score, h.snippet) for h in vault.recall(request).hits]
        assert got == expected, query
