"""Property checks of P17 against the core's own definitions in ``memvault.search``."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memvault
from memvault import search as text
from memvault.contract import terms as vocabulary

WORDS = ["tea", "Teas", "green", "the", "of", "walrus", "walruses", "red", "Run", "running", "NEAR", "or", "x"]
_ids = itertools.count()

line_st = st.lists(st.sampled_from(WORDS), min_size=0, max_size=6).map(" ".join)
doc_st = st.lists(line_st, min_size=1, max_size=12)
query_st = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)


@pytest.fixture(scope="module")
def shared_vault() -> Iterator[memvault.Vault]:
    # Words only: a module fixture is opened before the per-test MEMVAULT_EMBEDDER=off applies, and
    # the installed embedder's background vectors added hits by meaning, some runs and not others.
    with memvault.open("sqlite", path=":memory:", scanner="off", embedder="off") as vault:
        yield vault


@settings(max_examples=80, deadline=None)
@given(lines=doc_st, query=query_st)
def test_hits_are_exactly_the_lines_sharing_a_term_phrase_lines_first_p17(
    shared_vault: memvault.Vault, lines: list[str], query: str
) -> None:
    agent = f"agent{next(_ids)}"
    body = "\n".join(lines) + "\n"
    shared_vault.retain(
        memvault.RetainRequest(workspace_id="w", agent_id=agent, tier="pins", content=body, mode="replace")
    )
    parsed = text.Query.parse(query)
    wanted = set(parsed.terms)
    expected = {
        n
        for n, line in enumerate(body.splitlines(), start=1)
        if wanted & {vocabulary.stem(t) for t in vocabulary.tokenize(line)}
    }
    phrase_lines = {
        n
        for n, line in enumerate(body.splitlines(), start=1)
        if " ".join(parsed.phrase) and f" {' '.join(parsed.phrase)} " in f" {' '.join(vocabulary.tokenize(line))} "
    }
    hits = shared_vault.recall(memvault.RecallRequest(workspace_id="w", agent_id=agent, query=query, limit=20)).hits
    assert {h.line for h in hits} == expected  # documents here have at most 12 lines
    phrase_scores = [h.score for h in hits if h.line in phrase_lines]
    other_scores = [h.score for h in hits if h.line not in phrase_lines]
    assert all(s > 0.5 for s in phrase_scores)
    assert all(s < 0.5 for s in other_scores)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


chunk_st = st.lists(
    st.sampled_from(["tea", "green", "walrus", "red", " ", "\n", "\r", "\r\n", "\x0b", "\x85", "\u2028"]),
    min_size=1,
    max_size=8,
).map("".join)


@settings(max_examples=60, deadline=None)
@given(chunks=st.lists(chunk_st, min_size=1, max_size=6), query=st.sampled_from(["tea", "green", "walrus", "red"]))
def test_appends_index_the_same_lines_as_one_write_of_the_whole_body_p17(
    shared_vault: memvault.Vault, chunks: list[str], query: str
) -> None:
    appended, whole = f"agent{next(_ids)}", f"agent{next(_ids)}"
    for chunk in chunks:
        shared_vault.retain(
            memvault.RetainRequest(workspace_id="w", agent_id=appended, tier="pins", content=chunk, mode="append")
        )
    shared_vault.retain(
        memvault.RetainRequest(workspace_id="w", agent_id=whole, tier="pins", content="".join(chunks), mode="replace")
    )

    def found(agent: str) -> list[tuple[int, str, float]]:
        hits = shared_vault.recall(memvault.RecallRequest(workspace_id="w", agent_id=agent, query=query, limit=50))
        return [(h.line, h.snippet, h.score) for h in hits.hits]

    assert found(appended) == found(whole)
