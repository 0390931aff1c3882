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
from typing import Any

import psycopg
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
    " ".join(f"w{i}" for i in range(24)),  # 24 terms, most of them rare
    # 67 terms: beyond the 62 a bit mask per line holds, each term's lines are counted apart
    " ".join(["apple", "river", *(f"w{i}" for i in range(40)), *(f"x{i}" for i in range(25))]),
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
        if day == 4:
            lines.append("Ann: we saw a narwhal")
        if day == 8:  # longer than the shortest 1,000 lines: kept only as the narrower set's own line
            lines.append(f"Ann: {' '.join(f'filler{i}' for i in range(16))} narwhal")
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


def test_lines_forgotten_between_the_two_looks_are_all_scored(
    vault: memvault.Vault, memory: memvault.Vault, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1,220 lines share a query term: the first look finds more than the budget. Another agent forgets 600
    # of them before the second look (the narrowing transaction) begins. The 620 left fit the budget, so
    # recall scores them all, as the memory provider does after the same forgets; the narrower query
    # (both terms) would keep only the 20 long lines holding both, which the short lines outrank.
    filler = " ".join(f"filler{i}" for i in range(30))
    documents = {
        1: [f"garden {i}" for i in range(300)],
        2: [f"garden {i}" for i in range(300)],
        3: [f"garden {i}" for i in range(300)] + [f"walrus {filler} garden" for _ in range(20)],
        4: [f"walrus {i}" for i in range(300)],
    }
    for day, lines in documents.items():
        for store in (vault, memory):
            store.retain(
                memvault.RetainRequest(
                    workspace_id="w1",
                    agent_id="a",
                    tier="daily",
                    key=f"2024-03-0{day}",
                    content="".join(f"{line}\n" for line in lines),
                    mode="append",
                )
            )
    forgotten: list[int] = []
    transaction = psycopg.Connection.transaction

    def forget_first(self: psycopg.Connection[Any], *args: Any, **kwargs: Any) -> Any:
        if not forgotten:
            forgotten.append(1)
            for store in (vault, memory):
                for day in (1, 2):
                    store.forget(memvault.ForgetRequest(workspace_id="w1", agent_id="a", id=f"daily/2024-03-0{day}.md"))
        return transaction(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "transaction", forget_first)
    request = memvault.RecallRequest(workspace_id="w1", agent_id="a", query="garden walrus", limit=20)
    got = [(h.source, h.line, h.score, h.snippet) for h in vault.recall(request).hits]
    assert forgotten
    monkeypatch.undo()
    expected = [(h.source, h.line, h.score, h.snippet) for h in memory.recall(request).hits]
    assert len(expected) == 20
    assert any("filler" not in hit[3] for hit in expected)
    assert got == expected
