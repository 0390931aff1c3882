"""The database providers' ranking (memvault.search.rank_candidates, index_terms): its rules on small inputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import given
from hypothesis import strategies as st

from memvault.search import (
    LABEL_MIN_LINES,
    Candidate,
    Query,
    index_terms,
    names_date,
    query_dates,
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


def test_query_dates_reads_days_months_and_bare_month_names() -> None:
    assert query_dates("What did Tim say about his injury on 16 November, 2023?") == ((2023, 11, 16),)
    assert query_dates("What painting did she show on October 13, 2023?") == ((2023, 10, 13),)
    assert query_dates("the weekend before 4th Oct 2023") == ((2023, 10, 4),)
    assert query_dates("What setback did Melanie face in October 2023?") == ((2023, 10, None),)
    assert query_dates("When did Melanie go camping in June?") == ((None, 6, None),)


def test_query_dates_ignores_may_the_verb_lowercase_months_and_bare_years() -> None:
    assert query_dates("May I ask what she might march for?") == ()
    assert query_dates("How many times has she gone to the beach in 2023?") == ()
    assert query_dates("What did they plan for May 3, 2023?") == ((2023, 5, 3),)


def test_query_dates_skips_a_month_name_that_only_matches_ignoring_unicode_case() -> None:
    # "İ" matches "i" when case is ignored, but folds to "i" plus a dot: no month is named.
    assert query_dates("What did she do in Apr\u0130l 2023?") == ()


@given(st.text(alphabet=st.sampled_from("0123456789 ,.aAbcdeEghiIjJlmMnNoOprstuvyS\u0130\u017f\u0663"), max_size=40))
def test_query_dates_reads_any_text_without_failing(text: str) -> None:
    for year, month, day in query_dates(text):
        assert 1 <= month <= 12
        assert (year is None) <= (day is None)


def test_names_date_matches_daily_labels_only() -> None:
    assert names_date([(2023, 10, 13)], "daily/2023-10-13.md")
    assert not names_date([(2023, 10, 13)], "daily/2023-10-14.md")
    assert names_date([(2023, 10, None)], "daily/2023-10-30.md")
    assert names_date([(None, 6, None)], "daily/2022-06-01.md")
    assert not names_date([(None, 6, None)], "peers/june.md")
    assert not names_date([(None, 6, None)], "pins.md")


def test_a_named_date_ranks_that_days_lines_first() -> None:
    days = {
        "daily/2023-10-12.md": ["Mel: we painted a lake at sunrise."],
        "daily/2023-10-13.md": ["Mel: we painted a lake at sunrise."],
        "pins.md": ["Mel painted a lake once."],
    }
    assert rank("What did Mel paint on October 13, 2023?", days)[0] == ("daily/2023-10-13.md", 1)
    assert rank("What did Mel paint in October 2023?", days)[:2] == [
        ("daily/2023-10-12.md", 1),
        ("daily/2023-10-13.md", 1),
    ]
    # Without a date the shortest line wins and equal lines keep their label order.
    assert rank("What did Mel paint?", days) == [
        ("pins.md", 1),
        ("daily/2023-10-12.md", 1),
        ("daily/2023-10-13.md", 1),
    ]
