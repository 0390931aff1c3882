"""Layer 5, the search engine: line ranking for providers that scan documents line by line.

One query is prepared once (:class:`Query`), documents are indexed once per
version (:func:`index_document`), and :func:`search` scores the lines of a set
of indexed documents:

* a line containing the whole query as a phrase (the query's words in order,
  case-insensitive, punctuation ignored) scores in (0.5, 1];
* a line sharing only some terms scores in (0, 0.5), by BM25 over the lines
  searched, normalised by the best score the query could reach;
* a line sharing no term is never returned (contract P17).

Terms are case-folded, stop words dropped (unless the query is only stop
words) and reduced by a light English stemmer, so "What units does she
prefer?" finds "Prefers metric units.". What a term is (tokens, stop words,
the stemmer) is part of the contract (:mod:`memvault.contract.terms`): the
query bound (P14) counts the same terms this ranks by.

The memory provider uses it whole; the database providers (sqlite, postgres)
rank their candidates with its constants and :func:`contains_phrase`.

May import: :mod:`memvault.contract`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Protocol

from attrs import evolve, field, frozen

from memvault.contract.models import MAX_SNIPPET_CHARS, RecallSnippet
from memvault.contract.terms import STOP_WORDS, query_terms, stem, tokenize

__all__ = [
    "BM25_B",
    "BM25_K1",
    "DOCUMENT_WEIGHT",
    "NEIGHBOUR_WEIGHT",
    "PHRASE_FLOOR",
    "SECOND_NEIGHBOUR",
    "TERM_CEILING",
    "IndexedDocument",
    "IndexedLine",
    "Query",
    "SearchableDocument",
    "contains_phrase",
    "index_document",
    "search",
    "snippet_around",
    "with_digests",
]

#: BM25's term-frequency saturation and length normalisation, for every ranker built on this
#: module (the memory search below, and the sqlite and postgres providers' candidate ranking).
BM25_K1: Final = 1.2
BM25_B: Final = 0.75
#: Phrase lines score in (PHRASE_FLOOR, 1], lines that only share terms in (0, TERM_CEILING] (P17).
PHRASE_FLOOR: Final = 0.5
TERM_CEILING: Final = 0.49
#: Context signals of the database providers' ranking (sqlite, postgres), chosen on LoCoMo
#: conversations 0-4 only (docs/performance.md): the share of a line's score taken from its best
#: neighbour line in the same document (the answer often sits next to the line naming the
#: question's subject), lines two away counting at SECOND_NEIGHBOUR of their score, and the share
#: taken from how much of the query the line's whole document covers.
NEIGHBOUR_WEIGHT: Final = 0.30
SECOND_NEIGHBOUR: Final = 0.5
DOCUMENT_WEIGHT: Final = 0.15

_is_stop_word: Final = STOP_WORDS.__contains__


@frozen(kw_only=True)
class Query:
    """A prepared query: its phrase tokens and its unique search terms."""

    text: str
    phrase: tuple[str, ...]
    terms: tuple[str, ...]

    @property
    def joined_phrase(self) -> str:
        """The phrase as it appears inside :attr:`IndexedLine.joined`."""
        return f" {' '.join(self.phrase)} "

    @classmethod
    def parse(cls, text: str) -> Query:
        tokens = tokenize(text)
        return cls(text=text, phrase=tuple(tokens), terms=query_terms(tokens))


@frozen(kw_only=True)
class IndexedLine:
    """One non-blank line: its 1-based number, its text, tokens and term counts.

    ``joined`` is the tokens separated and surrounded by single spaces, so a
    phrase test is one substring search.
    """

    number: int
    text: str
    joined: str
    counts: dict[str, int] = field(eq=False)
    length: int


@frozen(kw_only=True)
class IndexedDocument:
    """A document's lines ready for :func:`search`, labelled with its source.

    ``postings`` maps each term to the positions (in ``lines``) of the lines
    holding it, so a search touches only the lines that share a term.
    """

    source: str
    lines: tuple[IndexedLine, ...]
    postings: dict[str, tuple[int, ...]] = field(eq=False)
    total_length: int

    @property
    def line_count(self) -> int:
        return len(self.lines)

    def positions(self, term: str) -> Sequence[int]:
        return self.postings.get(term, ())

    def line(self, position: int) -> IndexedLine:
        return self.lines[position]


class SearchableDocument(Protocol):
    """What :func:`search` reads from a document. :class:`IndexedDocument` is one.

    A provider may implement it lazily (index only the lines a query needs)
    as long as the answers equal those of :func:`index_document` on the body.
    """

    @property
    def source(self) -> str:
        """The document label hits carry."""

    @property
    def line_count(self) -> int:
        """How many lines have at least one token."""

    @property
    def total_length(self) -> int:
        """The sum of :attr:`IndexedLine.length` over those lines."""

    def positions(self, term: str) -> Sequence[int]:
        """Distinct positions of the lines whose counts hold ``term``, ascending (empty: none)."""

    def line(self, position: int) -> IndexedLine:
        """The indexed line at a position :meth:`positions` returned."""


def index_document(source: str, body: str) -> IndexedDocument:
    """Index ``body`` once; reuse the result until the document changes."""
    lines = []
    for number, text in enumerate(body.splitlines(), start=1):
        tokens = tokenize(text)
        if not tokens:
            continue
        # Stop words stay searchable for all-stop-word queries, at a low weight via df;
        # they do not count towards the line's length.
        counts = Counter(map(stem, tokens))
        length = len(tokens) - sum(map(_is_stop_word, tokens))
        lines.append(
            IndexedLine(
                number=number,
                text=text,
                joined=f" {' '.join(tokens)} ",
                counts=dict(counts),
                length=length or 1,
            )
        )
    postings: dict[str, list[int]] = {}
    for position, line in enumerate(lines):
        for term in line.counts:
            postings.setdefault(term, []).append(position)
    return IndexedDocument(
        source=source,
        lines=tuple(lines),
        postings={term: tuple(found) for term, found in postings.items()},
        total_length=sum(line.length for line in lines),
    )


def contains_phrase(tokens: Sequence[str], phrase: Sequence[str]) -> bool:
    """Whether ``phrase`` (a :class:`Query`'s phrase tokens) occurs consecutively in ``tokens``."""
    n = len(phrase)
    if n == 0 or n > len(tokens):
        return False
    first = phrase[0]
    return any(tok == first and tuple(tokens[i : i + n]) == tuple(phrase) for i, tok in enumerate(tokens))


def snippet_around(text: str, query: Query) -> str:
    """At most 500 characters of ``text`` around the first match of ``query``."""
    if len(text) <= MAX_SNIPPET_CHARS:
        return text
    low = text.casefold()
    start = -1
    if query.phrase:
        start = low.find(query.phrase[0])
    if start < 0:
        for term in query.terms:
            start = low.find(term)
            if start >= 0:
                break
    start = max(start, 0)
    begin = max(0, min(start - MAX_SNIPPET_CHARS // 4, len(text) - MAX_SNIPPET_CHARS))
    return text[begin : begin + MAX_SNIPPET_CHARS]


def with_digests(hits: Iterable[RecallSnippet], digests: Mapping[str, str]) -> list[RecallSnippet]:
    """``hits``, each carrying its document's body digest (``digests[hit.source]``), so the
    scanner can reuse a verdict without reading the document back (contract P29)."""
    return [evolve(hit, digest=digests[hit.source]) for hit in hits]


def search(query: Query, documents: Iterable[SearchableDocument], limit: int) -> list[RecallSnippet]:
    """Score every line of ``documents`` against ``query``; the best ``limit`` hits."""
    docs = list(documents)
    if not query.terms:
        return []
    wanted = query.terms
    n_lines = 0
    total_len = 0
    df: Counter[str] = Counter()
    candidates: list[tuple[str, IndexedLine]] = []
    for doc in docs:
        n_lines += doc.line_count
        total_len += doc.total_length
        positions: set[int] = set()
        for term in wanted:
            found = doc.positions(term)
            if found:
                df[term] += len(found)
                positions.update(found)
        candidates.extend((doc.source, doc.line(p)) for p in sorted(positions))
    if not candidates:
        return []
    phrase = query.joined_phrase
    avg_len = total_len / n_lines
    idf = {t: math.log(1.0 + (n_lines - df[t] + 0.5) / (df[t] + 0.5)) for t in wanted}
    best_possible = sum(idf.values()) * (BM25_K1 + 1.0) or 1.0
    scored: list[tuple[float, str, int, IndexedLine]] = []
    for source, line in candidates:
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * line.length / avg_len)
        bm25 = 0.0
        for term in wanted:
            tf = line.counts.get(term)
            if tf:
                bm25 += idf[term] * tf * (BM25_K1 + 1.0) / (tf + norm)
        relative = min(bm25 / best_possible, 1.0)
        if phrase in line.joined:
            score = PHRASE_FLOOR + (1.0 - PHRASE_FLOOR) * max(relative, 1e-6)
        else:
            score = TERM_CEILING * max(relative, 1e-6)
        scored.append((score, source, line.number, line))
    scored.sort(key=lambda item: (-item[0], item[1], item[2]))
    return [
        RecallSnippet(source=source, line=number, snippet=snippet_around(line.text, query), score=round(score, 6))
        for score, source, number, line in scored[:limit]
    ]
