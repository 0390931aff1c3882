"""The lazy per-file index answers exactly like memvault.search's full index (P17, P18)."""

from __future__ import annotations

import os
import threading

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memvault import search as text
from memvault.contract import terms as vocabulary
from memvault_local_disk.index import IndexCache
from memvault_local_disk.lazy import SCANS_BEFORE_WORDS, LazyDocument
from memvault_parity.fork import ForkedChild

# Words built to exercise every stemmer rule (plurals, -ies, -sses, -ing with doubled consonants,
# -ed, -ly, -ness, -ment), stop words, digits, non-ASCII case folding and punctuation.
_WORDS = [
    "fly",
    "flies",
    "flying",
    "study",
    "studies",
    "class",
    "classes",
    "run",
    "runs",
    "running",
    "runner",
    "prefer",
    "prefers",
    "preferred",
    "quick",
    "quickly",
    "kind",
    "kindness",
    "pay",
    "payment",
    "payments",
    "the",
    "a",
    "is",
    "what",
    "does",
    "she",
    "Straße",
    "STRASSE",
    "Σίσυφος",
    "ΣΊΣΥΦΟΣ",
    "x1",
    "2026",
    "units",
    "Unit",
    "metric",
    "café",
    "CAFÉ",
    "hopped",
    "hop",
    "box",
    "boxes",
    "ties",
    "tie",
    "runned",
    "ab",
    "abbing",
    "x",
    "_",
    "a_b",
    "ﬁne",
    "İstanbul",
]
_line = st.lists(
    st.one_of(st.sampled_from(_WORDS), st.sampled_from([",", ".", "-", "?", "!", "—", "  "])), max_size=12
).map(" ".join)
_body = st.lists(_line, max_size=25).map(lambda lines: "\n".join(lines))
_query = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=4).map(" ".join)


def _hits(doc: text.SearchableDocument | list[text.SearchableDocument], query: str) -> list[tuple[str, int, float]]:
    docs = doc if isinstance(doc, list) else [doc]
    return [(h.source, h.line, h.score) for h in text.search(text.Query.parse(query), docs, 1000)]


@settings(max_examples=300, deadline=None)
@given(body=_body, query=_query)
@example(body="The flies were flying\nstudies and classes\n\n  \nrunning fast", query="fly study class run")
def test_lazy_document_matches_the_full_index(body: str, query: str) -> None:
    full = text.index_document("doc.md", body)
    lazy = LazyDocument("doc.md", body)
    assert (lazy.line_count, lazy.total_length) == (full.line_count, full.total_length)
    assert _hits(lazy, query) == _hits(full, query)


@settings(max_examples=100, deadline=None)
@given(bodies=st.lists(_body, min_size=1, max_size=4), queries=st.lists(_query, min_size=1, max_size=3))
def test_repeated_queries_over_several_lazy_documents_match_the_full_index(
    bodies: list[str], queries: list[str]
) -> None:
    """The cached postings of an earlier query never change a later answer."""
    full: list[text.SearchableDocument] = [text.index_document(f"d{i}.md", b) for i, b in enumerate(bodies)]
    lazy: list[text.SearchableDocument] = [LazyDocument(f"d{i}.md", b) for i, b in enumerate(bodies)]
    for query in queries:
        assert _hits(lazy, query) == _hits(full, query)


def test_windows_line_endings_and_exotic_separators_number_lines_alike() -> None:
    body = "alpha one\r\nbeta two\rgamma alpha\x0bdelta\u2028alpha epsilon\x85zeta alpha"
    assert _hits(LazyDocument("d.md", body), "alpha") == _hits(text.index_document("d.md", body), "alpha")


_ascii_piece = st.sampled_from(
    [*"abcXYZ_019 .,-!?'\t\r\n\x0b\x0c\x1c\x1d\x1e", "the ", "is ", "flies ", "a_b ", "S\u017f"]
)
_ascii_body = st.lists(_ascii_piece, max_size=80).map("".join)


@settings(max_examples=300, deadline=None)
@given(body=_ascii_body, query=st.sampled_from(["the", "a_b", "fly", "abc", "x 019", "is the", "ss", "s"]))
def test_ascii_fast_path_counts_like_the_regex_tokeniser(body: str, query: str) -> None:
    """Underscores, digits, control characters and ASCII line separators (and U+017F, which folds to ASCII)."""
    full = text.index_document("doc.md", body)
    lazy = LazyDocument("doc.md", body)
    assert (lazy.line_count, lazy.total_length) == (full.line_count, full.total_length)
    assert _hits(lazy, query) == _hits(full, query)


@settings(max_examples=300, deadline=None)
@given(body=_body, terms=st.lists(st.sampled_from(_WORDS), min_size=SCANS_BEFORE_WORDS + 1, max_size=40))
@example(body="The flies were flying\nstudies, classes\nabbing ab x_1 a_b\nİstanbul ﬁne", terms=_WORDS)
def test_a_document_asked_many_terms_finds_the_same_lines_as_the_full_index(body: str, terms: list[str]) -> None:
    """Past the first terms a document answers from its list of words instead of scanning: every term's
    lines, and every ranking, stay those of the full index."""
    full = text.index_document("doc.md", body)
    lazy = LazyDocument("doc.md", body)
    stems = list(dict.fromkeys(map(vocabulary.stem, vocabulary.tokenize(" ".join(terms)))))
    for term in stems:
        lines = [lazy.line(p).number for p in lazy.positions(term)]
        assert lines == [full.line(p).number for p in full.positions(term)], term
    assert _hits(lazy, " ".join(terms)) == _hits(full, " ".join(terms))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_cached_document_is_searchable_in_a_child_forked_while_a_thread_fills_it() -> None:
    """A recall thread takes a cached document's lock to keep what it found; a child forked at that moment
    has no such thread, so the cache gives the child's documents locks of their own (P35)."""
    cache = IndexCache(1 << 20)
    doc = LazyDocument("doc.md", "alpha beta\ngamma delta\n")
    cache.put(("root", "doc.md"), (24, 0, 1, 1, 0), doc, read_at_ns=10**12)
    held, release = threading.Event(), threading.Event()

    def fill() -> None:
        with doc._lock:  # where a recall thread stands for a moment, keeping a term's lines
            held.set()
            release.wait(30)

    thread = threading.Thread(target=fill)
    thread.start()
    try:
        assert held.wait(10)

        def search() -> None:
            assert list(doc.positions("gamma")) == [1]

        outcome = ForkedChild(search).outcome(deadline=20)
    finally:
        release.set()
        thread.join()
    assert outcome == "ok", outcome
