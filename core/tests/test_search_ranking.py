"""The ranking (memvault.search.rank_candidates, index_terms, search): its rules on small inputs."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping, Sequence

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from memvault.contract.models import RecallSnippet
from memvault.contract.terms import tokenize
from memvault.search import (
    BM25_K1,
    CANDIDATE_BM25_B,
    CANDIDATE_BUDGET,
    DATE_WEIGHT,
    DOCUMENT_WEIGHT,
    LABEL_IDF,
    LABEL_MIN_LINES,
    NEIGHBOUR_WEIGHT,
    PHRASE_FLOOR,
    SECOND_NEIGHBOUR,
    TERM_CEILING,
    Candidate,
    Query,
    contains_phrase,
    index_document,
    index_terms,
    names_date,
    query_dates,
    rank_candidates,
    search,
    snippet_around,
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


# -- the ranking against a straightforward reference ----------------------------------------
#
# rank_candidates computes a column at a time (issue 18, target 1). reference_rank below is the
# ranking as it was written before, row by row; the two must give the same hits, scores and
# digests (floats compared exactly) on any candidates a provider can pass.


def reference_rank(
    query: Query,
    candidates: Sequence[Candidate],
    *,
    line_count: int,
    term_count: int,
    limit: int,
    texts: Callable[[Sequence[int]], Mapping[int, tuple[str, str]]],
    df: Sequence[int] | None = None,
) -> list[RecallSnippet]:
    """The database providers' ranking, one candidate line at a time (the rules in memvault.search)."""
    wanted = index_terms(query)
    if not wanted:
        return []
    indices = range(len(wanted))
    rows: list[tuple[Candidate, list[int], int]] = []
    for row in candidates:
        words = row[4].split()
        counts = [words.count(t) for t in wanted]
        mask = sum(1 << i for i in indices if counts[i])
        if mask:
            rows.append((row, counts, mask))
    if not rows:
        return []
    held = [sum(1 for _, counts, _ in rows if counts[i]) for i in indices]
    leading = [sum(1 for row, counts, _ in rows if counts[i] and row[4].split()[0] == wanted[i]) for i in indices]
    df = held if df is None else df
    labels = [i for i in indices if leading[i] >= LABEL_MIN_LINES and 2 * leading[i] >= held[i]]
    for row, counts, _ in rows:
        for i in labels:
            if counts[i]:
                counts[i] = 1 if row[4].split()[0] == wanted[i] else 0
    n_lines = max(line_count, len(rows))
    avg_len = max(term_count, 1) / max(n_lines, 1)
    idf = [math.log(1.0 + (n_lines - d + 0.5) / (d + 0.5)) for d in df]
    for i in labels:
        idf[i] = LABEL_IDF
    best_possible = sum(idf) * (BM25_K1 + 1.0) or 1.0
    total_idf = sum(idf) or 1.0
    weight = [w * (BM25_K1 + 1.0) / best_possible for w in idf]
    relative: dict[tuple[int, int], float] = {}
    covered: dict[int, int] = {}
    for row, counts, mask in rows:
        norm = BM25_K1 * (1.0 - CANDIDATE_BM25_B) + BM25_K1 * CANDIDATE_BM25_B / avg_len * row[5]
        score = 0.0
        for i in indices:
            if counts[i]:
                score += weight[i] * counts[i] / (counts[i] + norm)
        relative[(row[1], row[3])] = min(score, 1.0)
        covered[row[1]] = covered.get(row[1], 0) | mask
    cover = {doc: sum(idf[i] for i in indices if mask >> i & 1) / total_idf for doc, mask in covered.items()}
    own_weight = 1.0 - NEIGHBOUR_WEIGHT - DOCUMENT_WEIGHT
    dates = query_dates(query.text)
    scored: list[tuple[float, str, int, int]] = []
    text: dict[int, tuple[str, str]] = {}
    for row, _counts, mask in rows:
        doc, number = row[1], row[3]
        neighbour = max(
            relative.get((doc, number - 1), 0.0),
            relative.get((doc, number + 1), 0.0),
            SECOND_NEIGHBOUR * relative.get((doc, number - 2), 0.0),
            SECOND_NEIGHBOUR * relative.get((doc, number + 2), 0.0),
        )
        blended = own_weight * relative[(doc, number)] + NEIGHBOUR_WEIGHT * neighbour + DOCUMENT_WEIGHT * cover[doc]
        if names_date(dates, row[2]):
            blended += DATE_WEIGHT
        blended = min(max(blended, 1e-5), 1.0)
        text.update(texts([row[0]]))
        if mask == (1 << len(wanted)) - 1 and contains_phrase(tokenize(text[row[0]][0]), query.phrase):
            score = PHRASE_FLOOR + (1.0 - PHRASE_FLOOR) * blended
        else:
            score = TERM_CEILING * blended
        scored.append((score, row[2], number, row[0]))
    scored.sort(key=lambda item: (-item[0], item[1], item[2], item[3]))
    return [
        RecallSnippet(
            source=label,
            line=number,
            snippet=snippet_around(text[lid][0], query),
            score=round(score, 6),
            digest=text[lid][1],
        )
        for score, label, number, lid in scored[:limit]
    ]


#: Words that stem alike ("paint", "painted", "painting"), stop words, question-frame words, a
#: speaker's name, digits, accented and non-Latin words, the words of a date ("2 October 2024",
#: "October 2024", "October"; the documents are daily notes of October 2024): lines and queries
#: are drawn from these.
VOCABULARY = (
    "caroline", "melanie", "paint", "painted", "painting", "paints", "art", "river", "kind", "what",
    "did", "the", "a", "very", "go", "café", "naïve", "東京", "x1", "2024", "mother_in_law", "über",
    "October", "2", "june",
)  # fmt: skip
SEPARATORS = (" ", ", ", " - ", "'s ", "! ", ": ", "  ", " / ")


@st.composite
def line_texts(draw: st.DrawFn) -> str:
    words = draw(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=9))
    if draw(st.booleans()):
        words.insert(1, words[0])  # a word twice in a row
    text = words[0]
    for word in words[1:]:
        text += draw(st.sampled_from(SEPARATORS)) + word
    speaker = draw(st.sampled_from(("", "Caroline: ", "Caroline: ", "Melanie: ")))
    return speaker + text.capitalize() if draw(st.booleans()) else speaker + text


Inputs = tuple[Query, list[Candidate], dict[int, tuple[str, str]], int, int, int]


def inputs_for(query: str, documents: Sequence[Sequence[tuple[int, str]]], limit: int, extra: int = 0) -> Inputs:
    """What a provider passes for ``query`` over ``documents`` (each a list of (line number, text))."""
    parsed = Query.parse(query)
    wanted = set(index_terms(parsed))
    candidates: list[Candidate] = []
    text: dict[int, tuple[str, str]] = {}
    line_count = term_count = 0
    for doc_id, lines in enumerate(documents, start=1):
        for number, line in lines:
            stored = stored_line(number, line)
            if stored is None:
                continue
            line_count += 1
            term_count += stored.length
            line_id = 1000 * doc_id + number
            text[line_id] = (line, f"{doc_id:064x}")
            if wanted & set(stored.terms.split()):
                label = f"daily/2024-10-{doc_id:02d}.md"
                candidates.append((line_id, doc_id, label, number, stored.terms, stored.length))
    # `extra` lines of the searched partitions share no term with the query.
    return parsed, candidates, text, line_count + extra, term_count + 7 * extra, limit


@st.composite
def ranking_inputs(draw: st.DrawFn) -> Inputs:
    """A query, its candidates (as a provider finds them), their texts, line and term counts, a limit."""
    documents: list[list[tuple[int, str]]] = []
    for lines in draw(st.lists(st.lists(line_texts(), min_size=1, max_size=60), min_size=1, max_size=4)):
        number = 0
        numbered = []
        for line in lines:
            number += draw(st.sampled_from((1, 1, 1, 2, 3)))  # blank lines between some
            numbered.append((number, line))
        documents.append(numbered)
    all_lines = [line for lines in documents for _, line in lines]
    if draw(st.booleans()):  # the query is part of a line: a phrase to find
        tokens = tokenize(draw(st.sampled_from(all_lines)))
        start = draw(st.integers(0, len(tokens) - 1))
        query = " ".join(tokens[start : start + draw(st.integers(1, 4))])
    else:
        query = " ".join(draw(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=5)))
    return inputs_for(query, documents, draw(st.sampled_from((1, 3, 20))), extra=draw(st.integers(0, 50)))


def test_a_one_word_phrase_is_a_whole_token() -> None:
    # "paint" is the term of "painted" too; only lines holding the token "paint" hold the phrase.
    lines = [(1, "Caroline: painted it"), (2, "Melanie: paint-brush"), (3, "a paintbox, painting"), (4, "_paint_")]
    assert_same(*inputs_for("paint", [lines], limit=5))
    assert_same(*inputs_for("it paint", [[(1, "it painted"), (2, "It: paint"), (3, "it  paint")]], limit=5))


def test_a_label_needs_half_of_the_lines_holding_it() -> None:
    # 25 lines begin with "caroline" and 26 shorter ones hold it inside: no label, the shorter lines
    # rank first. Of 45 lines, 25 begin with it: a label, and the lines naming her inside count "art" only.
    begin = [(n, f"Caroline: art number {n} again") for n in range(1, 26)]
    inside = [(n, "Melanie: caroline art") for n in range(1, 27)]
    for holding_inside in (inside, inside[:20]):
        assert_same(*inputs_for("art caroline", [begin, holding_inside], limit=5))
    query, candidates, text, line_count, term_count, _ = inputs_for("art caroline", [begin, inside], limit=1)
    best = rank_candidates(
        query, candidates, line_count=line_count, term_count=term_count, limit=1, texts=text_of(text)
    )
    assert (best[0].source, best[0].line) == ("daily/2024-10-02.md", 1)


@given(ranking_inputs())
@example(inputs_for("caroline paint", [], limit=5))
def test_rank_candidates_equals_the_reference_ranking(inputs: Inputs) -> None:
    assert_same(*inputs)


def assert_same(
    query: Query,
    candidates: list[Candidate],
    text: dict[int, tuple[str, str]],
    line_count: int,
    term_count: int,
    limit: int,
) -> None:
    asked: list[int] = []

    def texts(ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        asked.extend(ids)
        return {i: text[i] for i in ids}

    expected = reference_rank(
        query, candidates, line_count=line_count, term_count=term_count, limit=limit, texts=text_of(text)
    )
    got = rank_candidates(query, candidates, line_count=line_count, term_count=term_count, limit=limit, texts=texts)
    assert got == expected
    assert len(asked) == len(set(asked))  # no line is read twice


@given(ranking_inputs(), st.data())
def test_rank_candidates_on_a_narrowed_subset_equals_the_reference_ranking(inputs: Inputs, data: st.DataObject) -> None:
    # A provider that narrows a big candidate set passes the partition's document frequencies.
    query, candidates, text, line_count, term_count, limit = inputs
    df = [sum(1 for c in candidates if term in c[4].split()) for term in index_terms(query)]
    subset = [c for c in candidates if data.draw(st.booleans())]
    expected = reference_rank(
        query, subset, line_count=line_count, term_count=term_count, limit=limit, df=df, texts=text_of(text)
    )
    got = rank_candidates(
        query, subset, line_count=line_count, term_count=term_count, limit=limit, df=df, texts=text_of(text)
    )
    assert got == expected


def text_of(text: Mapping[int, tuple[str, str]]) -> Callable[[Sequence[int]], dict[int, tuple[str, str]]]:
    return lambda ids: {i: text[i] for i in ids}


@given(
    st.lists(st.lists(st.one_of(line_texts(), st.just(""), st.just("-- !")), min_size=1, max_size=40), max_size=4),
    st.one_of(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=5).map(" ".join), line_texts()),
    st.sampled_from((1, 3, 20)),
)
def test_search_ranks_indexed_documents_as_rank_candidates_does(
    documents: list[list[str]], query: str, limit: int
) -> None:
    # search() (memory, local-disk, the template) counts terms from the indexed lines' counts instead of
    # scanning index words: the same hits as the reference ranking of the same candidates.
    indexed = [index_document(f"daily/2024-10-{d + 1:02d}.md", "\n".join(lines)) for d, lines in enumerate(documents)]
    parsed = Query.parse(query)
    wanted = set(index_terms(parsed))
    candidates: list[Candidate] = []
    text: dict[int, tuple[str, str]] = {}
    line_count = term_count = 0
    for doc_id, lines in enumerate(documents):
        for number, line in enumerate(lines, start=1):
            stored = stored_line(number, line)
            if stored is None:
                continue
            line_count += 1
            term_count += stored.length
            text[len(text)] = (line, "")
            if wanted & set(stored.terms.split()):
                candidates.append((len(text) - 1, doc_id, indexed[doc_id].source, number, stored.terms, stored.length))
    expected = reference_rank(
        parsed, candidates, line_count=line_count, term_count=term_count, limit=limit, texts=text_of(text)
    )
    assert search(parsed, indexed, limit) == expected


@pytest.mark.parametrize(
    "query", ["apple river garden", "narwhal river apple", "river", "apple river garden music walks", "narwhal ann"]
)
def test_search_above_the_candidate_budget_ranks_the_narrowed_subset(query: str) -> None:
    # 2,000 lines, most sharing a common term. The subset, as the rule says: the lines holding a rare term
    # (in at most a quarter of the budget's lines) and those holding at least j of the terms, for the first
    # j = 2, 3, ... that fits the budget; when none fits, the shortest lines of the last; when the one that
    # fits has fewer lines than the limit, the shortest other lines of the level before fill the budget.
    rng = random.Random(3)
    words = ["apple", "river", "garden", "music", "walks", *(f"w{i}" for i in range(40))]
    weights = [30, 20, 12, 8, 6, *([1] * 40)]
    documents = [
        [f"Ann: {' '.join(rng.choices(words, weights, k=rng.randint(3, 12)))}" for _ in range(250)]
        + (["Ann: the narwhal swam by the river"] if d % 3 == 0 else [])
        for d in range(8)
    ]
    indexed = [index_document(f"daily/2024-03-{d + 1:02d}.md", "\n".join(lines)) for d, lines in enumerate(documents)]
    parsed = Query.parse(query)
    terms = index_terms(parsed)
    every: list[tuple[Candidate, set[str]]] = []
    text: dict[int, tuple[str, str]] = {}
    line_count = term_count = 0
    for doc_id, lines in enumerate(documents):
        for number, line in enumerate(lines, start=1):
            stored = stored_line(number, line)
            assert stored is not None
            line_count += 1
            term_count += stored.length
            text[len(text)] = (line, "")
            held = set(terms) & set(stored.terms.split())
            if held:
                row = (len(text) - 1, doc_id, indexed[doc_id].source, number, stored.terms, stored.length)
                every.append((row, held))
    assert len(every) > CANDIDATE_BUDGET
    df = [sum(1 for _, held in every if t in held) for t in terms]
    rare = {t for t, d in zip(terms, df, strict=True) if d <= CANDIDATE_BUDGET // 4}
    levels = [every]
    for j in range(2, len(terms) + 1):
        if len(rare) == len(terms) or math.comb(len(terms), j) > 64:
            break
        levels.append([(row, held) for row, held in every if held & rare or len(held) >= j])
    fitting = next((k for k, level in enumerate(levels) if len(level) <= CANDIDATE_BUDGET), None)
    if fitting is None:
        subset = sorted(levels[-1], key=lambda c: c[0][5])[:CANDIDATE_BUDGET]
    else:
        subset = levels[fitting]
        if len(subset) < 20:
            others = sorted((c for c in levels[fitting - 1] if c not in subset), key=lambda c: c[0][5])
            subset = subset + others[: CANDIDATE_BUDGET - len(subset)]
    expected = reference_rank(
        parsed,
        [row for row, _ in subset],
        line_count=line_count,
        term_count=term_count,
        limit=20,
        df=df,
        texts=text_of(text),
    )
    assert len(expected) == 20
    assert search(parsed, indexed, 20) == expected


_WORD_TOKENS = re.compile(r"\w+")


@given(st.one_of(st.text(alphabet=st.characters(max_codepoint=127)), st.text()))
@example("Caroline: I went to the LGBTQ support-group_2 yesterday!\x1c\x1fEND\t\u00e9")
@example("ÉTÉ straße ǅ \u0130stanbul")
def test_tokenize_is_regex_words_of_the_casefolded_text(text: str) -> None:
    """The ASCII fast path (a byte translation and a split) gives exactly ``\\w+`` of ``casefold()``."""
    assert tokenize(text) == _WORD_TOKENS.findall(text.casefold())
