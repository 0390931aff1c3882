"""The database providers' ranking (memvault.search.rank_candidates, index_terms): its rules on small inputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from memvault.search import (
    LABEL_MIN_LINES,
    Candidate,
    Query,
    index_terms,
    rank_candidates,
    stored_line,
)


def rank(query: str, documents: Mapping[str, Sequence[str]], limit: int = 5) -> list[tuple[str, int]]:
    """Rank every line of ``documents`` sharing a query word, as a provider would; (label, line) best first."""
    parsed = Query.parse(query)
    wanted = set(index_terms(parsed))
    candidates: list[Candidate] = []
    text: dict[int, tuple[str, str]] = {}
    line_count = term_count = 0
    for doc_id, (label, lines) in enumerate(documents.items()):
        for number, line in enumerate(lines, start=1):
            stored = stored_line(number, line)
            assert stored is not None
            line_count += 1
            term_count += stored.length
            line_id = len(text)
            text[line_id] = (line, "0" * 64)
            if wanted & set(stored.terms.split()):
                candidates.append((line_id, doc_id, label, number, stored.terms, stored.length))
    hits = rank_candidates(
        parsed,
        candidates,
        line_count=line_count,
        term_count=term_count,
        limit=limit,
        texts=lambda ids: {i: text[i] for i in ids},
    )
    return [(hit.source, hit.line) for hit in hits]


def test_question_frame_words_are_not_searched_for() -> None:
    assert index_terms(Query.parse("What kind of art does Caroline make?")) == ("art", "caroline")
    assert index_terms(Query.parse("How long has she lived here?")) == ("liv",)


def test_a_query_of_question_frame_words_only_keeps_them() -> None:
    assert index_terms(Query.parse("how long?")) == ("long",)


def test_question_frame_words_do_not_rank_lines() -> None:
    # "kind" is not searched for: a line sharing only it is no candidate, the line about art wins.
    ranked = rank(
        "What kind of art does Caroline make?",
        {"a": ["Thanks for your kind words!", "Caroline likes art."]},
    )
    assert ranked == [("a", 2)]


def test_a_label_counts_where_it_begins_the_line_only() -> None:
    # "caroline" begins many lines: it labels them (a speaker). Melanie's line names Caroline
    # inside it and holds the same words; Caroline's own line ranks first.
    filler = [f"Caroline: hello number {i}" for i in range(LABEL_MIN_LINES)]
    ranked = rank(
        "What did Caroline paint?",
        {
            "a.md": ["Melanie: Caroline painted it!"],
            "b.md": ["Caroline: Melanie painted it!"],
            "c.md": filler,
        },
    )
    assert ranked[:2] == [("b.md", 1), ("a.md", 1)]


def test_a_term_beginning_few_lines_is_no_label() -> None:
    # Below LABEL_MIN_LINES lines it is an ordinary word: both lines hold the same words and tie,
    # so the first label wins.
    ranked = rank(
        "What did Caroline paint?",
        {"a.md": ["Melanie: Caroline painted it!"], "b.md": ["Caroline: Melanie painted it!"]},
    )
    assert ranked == [("a.md", 1), ("b.md", 1)]
