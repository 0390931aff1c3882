"""Layer 5, the search engine: line ranking for providers that scan documents line by line.

One query is prepared once (:class:`Query`), documents are indexed once per
version (:func:`index_document`), and :func:`search` scores the lines of a set
of indexed documents (:func:`rank_candidates`, below, does the scoring):

* a line containing the whole query as a phrase (the query's words in order,
  case-insensitive, punctuation ignored) scores in (0.5, 1];
* a line sharing only some terms scores in (0, 0.5), by BM25 over the lines
  searched, normalised by the best score the query could reach, blended with
  its neighbour lines' scores, how much of the query its document covers and
  whether the query names the day of its daily document;
* a line sharing no term is never returned (contract P17).

Terms are case-folded, stop words dropped (unless the query is only stop
words) and reduced by a light English stemmer, so "What units does she
prefer?" finds "Prefers metric units.". What a term is (tokens, stop words,
the stemmer) is part of the contract (:mod:`memvault.contract.terms`): the
query bound (P14) counts the same terms this ranks by.

The memory, local-disk and template providers use :func:`search`; the
database providers (sqlite, postgres) find candidate lines with their own index
and rank them with :func:`rank_candidates`. Both rank the same lines the same
way, so every first-party provider returns the same hits for the same documents.

May import: :mod:`memvault.contract`.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, compress, repeat
from operator import add, attrgetter, ge, mul, neg, sub
from typing import TYPE_CHECKING, Final, Protocol

from attrs import evolve, field, frozen

from memvault.contract.embedding import QueryVector
from memvault.contract.models import MAX_SNIPPET_CHARS, RecallSnippet
from memvault.contract.terms import STOP_WORDS, query_terms, stem, tokenize

__all__ = [
    "FUSION_DEPTH",
    "MEANING_WEIGHT",
    "SIMILARITY_FLOOR",
    "VECTOR_DEPTH",
    "LineRef",
    "first_changed_line",
    "fuse",
    "meaning_score",
    "similarities",
    "CANDIDATE_BUDGET",
    "Candidate",
    "StoredLine",
    "index_term",
    "index_terms",
    "rank_candidates",
    "stored_line",
    "BM25_B",
    "BM25_K1",
    "CANDIDATE_BM25_B",
    "DATE_WEIGHT",
    "DOCUMENT_WEIGHT",
    "LABEL_IDF",
    "LABEL_MIN_LINES",
    "NEIGHBOUR_WEIGHT",
    "PHRASE_FLOOR",
    "QUESTION_FRAME_TERMS",
    "SECOND_NEIGHBOUR",
    "TERM_CEILING",
    "IndexedDocument",
    "IndexedLine",
    "Query",
    "SearchableDocument",
    "contains_phrase",
    "index_appended",
    "index_document",
    "names_date",
    "narrowed_levels",
    "narrowed_subset",
    "narrowing",
    "query_dates",
    "search",
    "snippet_around",
    "with_digests",
]

#: BM25's term-frequency saturation, for every ranker built on this module. BM25_B is the
#: length normalisation :func:`search` used before it ranked with :func:`rank_candidates`
#: (CANDIDATE_BM25_B); kept for code that imports it.
BM25_K1: Final = 1.2
BM25_B: Final = 0.75
#: Phrase lines score in (PHRASE_FLOOR, 1], lines that only share terms in (0, TERM_CEILING] (P17).
PHRASE_FLOOR: Final = 0.5
TERM_CEILING: Final = 0.49
#: Context signals of the ranking (:func:`rank_candidates`, every provider), chosen on LoCoMo
#: conversations 0-4 only (docs/performance.md): the share of a line's score taken from its best
#: neighbour line in the same document (the answer often sits next to the line naming the
#: question's subject), lines two away counting at SECOND_NEIGHBOUR of their score, and the share
#: taken from how much of the query the line's whole document covers.
NEIGHBOUR_WEIGHT: Final = 0.30
SECOND_NEIGHBOUR: Final = 0.5
DOCUMENT_WEIGHT: Final = 0.15
#: BM25's length normalisation in the ranking: a long line is penalised less than with the
#: usual 0.75 (BM25_B), chosen on LoCoMo conversations 0-4 only.
CANDIDATE_BM25_B: Final = 0.30
#: Label terms: a query term that begins at least
#: LABEL_MIN_LINES candidate lines, and at least half of the candidate lines holding it, labels
#: lines ("Caroline: ..." in a transcript, a speaker's name). It counts only where it begins a
#: line (a name inside a line is someone else talking to or about them), with a fixed idf of
#: LABEL_IDF. Chosen on LoCoMo conversations 0-4 only (docs/performance.md).
LABEL_MIN_LINES: Final = 20
LABEL_IDF: Final = 1.0
#: Stemmed words that frame a question rather than name what it is about ("what *kind* of",
#: "how *long*", "did she *mention*") and light verbs ("*go* to", "*take* part"): a search
#: does not look for them unless a query has nothing else. Chosen on LoCoMo
#: conversations 0-4 only (docs/performance.md).
QUESTION_FRAME_TERMS: Final = frozenset(
    {"kind", "type", "many", "recent", "long", "mention", "describe", "say", "ever", "go", "get", "make", "take"}
)

#: A query naming a date ("on 16 November, 2023", "in October 2023", "in June") favours the lines
#: of the daily documents of that day or month (labels ``daily/YYYY-MM-DD.md``, contract P4): the
#: ranking adds DATE_WEIGHT to their score (see :func:`query_dates`). Chosen on LoCoMo
#: conversations 0-4 only (docs/performance.md).
DATE_WEIGHT: Final = 0.10

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

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
    #: How many lines ``str.splitlines`` finds in the body, blank ones included (-1: not known);
    #: :func:`index_appended` starts numbering the appended lines from it.
    body_lines: int = field(default=-1, eq=False)

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
    lines, body_lines = _indexed_lines(body, 1)
    postings: dict[str, list[int]] = {}
    for position, line in enumerate(lines):
        for term in line.counts:
            postings.setdefault(term, []).append(position)
    return IndexedDocument(
        source=source,
        lines=tuple(lines),
        postings={term: tuple(found) for term, found in postings.items()},
        total_length=sum(line.length for line in lines),
        body_lines=body_lines,
    )


def index_appended(previous: IndexedDocument, stored: str, body: str) -> IndexedDocument:
    """``index_document(previous.source, body)``, where ``previous`` indexes ``stored`` and
    ``body`` extends it (an append): only the new text is tokenised (with the stored body's
    last line when the new text may go on it: no line break yet, or a trailing "\\r"), so an
    append costs what it adds rather than what the document holds. ``previous`` is not changed (readers may hold it).

    Any other ``body`` (a replace) is indexed whole. Equal to :func:`index_document` on
    ``body`` in every field (a property test holds the two equal).
    """
    if not stored or not body.startswith(stored):
        return index_document(previous.source, body)
    offset, kept = _complete_lines(stored, previous.body_lines)
    first_new = kept + 1
    cut = len(previous.lines)
    while cut and previous.lines[cut - 1].number >= first_new:
        cut -= 1
    added, added_lines = _indexed_lines(body[offset:], first_new)
    postings = dict(previous.postings)
    total_length = previous.total_length
    for line in previous.lines[cut:]:  # at most one: the stored body's unfinished last line
        total_length -= line.length
        for term in line.counts:
            found = postings[term][:-1]  # its position is the last of each of its terms' postings
            if found:
                postings[term] = found
            else:
                del postings[term]
    grouped: dict[str, list[int]] = {}
    for position, line in enumerate(added, start=cut):
        total_length += line.length
        for term in line.counts:
            grouped.setdefault(term, []).append(position)
    for term, positions in grouped.items():
        postings[term] = postings.get(term, ()) + tuple(positions)
    return IndexedDocument(
        source=previous.source,
        lines=previous.lines[:cut] + tuple(added),
        postings=postings,
        total_length=total_length,
        body_lines=kept + added_lines,
    )


#: The line breaks of ``str.splitlines`` ("\r\n" is one, and counted once by :func:`_complete_lines`).
_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def _complete_lines(stored: str, stored_lines: int = -1) -> tuple[int, int]:
    """Where the lines of ``stored`` that no appended text can change end, and how many they are.

    Every line ending in a line break is one; the last line goes on in appended text when it
    has no line break yet, or ends in a "\\r" that an appended "\\n" joins. ``stored_lines`` is
    ``len(stored.splitlines())`` when known (-1: counted here, by single-character scans in C).
    """
    end = len(stored)
    last = stored[-1]
    if last in _BREAKS and last != "\r":
        offset = end
    else:
        before = end - 1 if last == "\r" else end
        # The last line starts after the last line break before it: look near the end first.
        window = max(before - 4096, 0)
        offset = max(stored.rfind(brk, window, before) for brk in _BREAKS) + 1
        if offset == 0 and window:
            offset = max(stored.rfind(brk, 0, window) for brk in _BREAKS) + 1
    if stored_lines >= 0:
        return offset, stored_lines - (offset < end)
    return offset, sum(stored.count(brk, 0, offset) for brk in _BREAKS) - stored.count("\r\n", 0, offset)


def first_changed_line(stored: str, stored_lines: int = -1) -> int:
    """The number of the first line of ``stored`` that text appended to it may change (or add).

    Every line before it ends in a line break no appended text can join: a provider keeps
    those lines' vectors across an append (contract P37). ``stored_lines`` as for
    :func:`index_appended` (``len(stored.splitlines())`` when known, else -1).
    """
    if not stored:
        return 1
    return _complete_lines(stored, stored_lines)[1] + 1


def _indexed_lines(text: str, first_number: int) -> tuple[list[IndexedLine], int]:
    """The non-blank lines of ``text``, numbered from ``first_number``, and how many lines it has."""
    lines = []
    split = text.splitlines()
    for number, line_text in enumerate(split, start=first_number):
        tokens = tokenize(line_text)
        if not tokens:
            continue
        # Stop words stay searchable for all-stop-word queries, at a low weight via df;
        # they do not count towards the line's length.
        counts = Counter(map(stem, tokens))
        length = len(tokens) - sum(map(_is_stop_word, tokens))
        lines.append(
            IndexedLine(
                number=number,
                text=line_text,
                joined=f" {' '.join(tokens)} ",
                counts=dict(counts),
                length=length or 1,
            )
        )
    return lines, len(split)


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
    """The best ``limit`` lines of ``documents`` for ``query``, ranked as the database providers rank.

    The lines sharing a search term with the query (:func:`index_terms`) are the
    candidates, and :func:`rank_candidates` scores them over the statistics of all
    of ``documents``. Above :data:`CANDIDATE_BUDGET` candidates it scores the
    subset :func:`narrowing` picks, as the sqlite provider does. So the memory,
    local-disk and template providers and sqlite return the same hits, scores
    included, for the same documents (when even the narrowest subset is over the
    budget, its shortest lines are kept, and lines of equal length may be picked
    in another order than sqlite's or postgres's). Hits carry no digest (see :func:`with_digests`).
    """
    docs = list(documents)
    if not query.terms:
        return []
    stems = _searched(query)  # index_terms' terms, as the stems the documents' postings are keyed by
    line_count = sum(map(_line_count, docs))
    term_count = sum(map(_total_length, docs))
    found: list[IndexedLine] = []
    doc_of: list[int] = []
    sources: dict[int, str] = {}
    holders: list[list[Sequence[int]]] = []  # per document with a candidate, the lines holding each term
    one = stems[0] if len(stems) == 1 else None
    for number, doc in enumerate(docs):  # (years of daily notes: most documents hold no query term)
        if one is not None:
            held = [doc.positions(one)]
            positions = held[0]
        else:
            held = list(map(doc.positions, stems))
            positions = sorted(set().union(*held))
        if not positions:
            continue
        lines = list(map(doc.line, positions))
        found.extend(lines)
        doc_of.extend(repeat(number, len(lines)))
        sources[number] = doc.source
        holders.append(held)
    if not found:
        return []
    df: list[int] | None = None
    if len(found) > CANDIDATE_BUDGET:
        # Many lines share a term (common words, a long history): score the subset a narrower
        # search keeps, with the document frequencies of all of them.
        df = [sum(map(len, column)) for column in zip(*holders, strict=True)]
        rare, levels = narrowing(df)
        # A line's level: how many of the query's terms it holds, or any level if it holds a rare one.
        level_of: list[int] = []
        for held in holders:
            level = Counter(chain.from_iterable(held))
            for i in rare:
                for position in held[i]:
                    level[position] += len(stems)
            level_of.extend(map(level.__getitem__, sorted(level)))
        keep = narrowed_subset(level_of, list(map(_length, found)), levels, limit)
        found = list(map(found.__getitem__, keep))
        doc_of = list(map(doc_of.__getitem__, keep))
    rows: list[Candidate] = list(
        zip(
            range(len(found)),
            doc_of,
            map(sources.__getitem__, doc_of),
            map(_number, found),
            map(_line_words, map(_joined, found)),
            map(_length, found),
            strict=True,
        )
    )

    def texts(ids: Sequence[int]) -> dict[int, tuple[str, str]]:
        return {i: (found[i].text, "") for i in ids}

    return rank_candidates(
        query,
        rows,
        line_count=line_count,
        term_count=term_count,
        limit=limit,
        texts=texts,
        df=df,
        term_counts=list(map(_counts, found)),
    )


#: Above this many candidate lines a search ranks the bounded subset :func:`narrowing` picks
#: (:func:`search`, and the sqlite provider's recall).
CANDIDATE_BUDGET: Final = 1000
#: At most this many combinations of terms in one narrower search (an FTS5 query's AND-clauses).
_MAX_COMBINATIONS: Final = 64


def narrowed_subset(level_of: Sequence[int], lengths: Sequence[int], levels: Sequence[int], limit: int) -> list[int]:
    """The positions of the candidates to score, ascending, when there are more than the budget.

    ``level_of[i]`` is how many of the query's terms candidate ``i`` holds, or more than
    any level when it holds a rare one; ``levels`` are :func:`narrowing`'s. The first level
    whose lines fit the budget is kept; when none fits, the shortest lines of the last
    (``lengths``, ties by position), which BM25's length norm ranks first among equals;
    when the one that fits has fewer lines than ``limit``, the shortest other lines of
    the level before it (or of all candidates) fill the budget.
    """
    wider, chosen = narrowed_levels(Counter(level_of), levels)
    keep = list(compress(range(len(level_of)), map(ge, level_of, repeat(chosen))))
    if len(keep) > CANDIDATE_BUDGET:
        return sorted(sorted(keep, key=lengths.__getitem__)[:CANDIDATE_BUDGET])
    if len(keep) < limit:
        more = compress(range(len(level_of)), map(ge, level_of, repeat(wider)))
        others = sorted(set(more).difference(keep), key=lambda i: (lengths[i], i))
        keep = sorted(keep + others[: CANDIDATE_BUDGET - len(keep)])
    return keep


def narrowed_levels(at_level: Mapping[int, int], levels: Sequence[int]) -> tuple[int, int]:
    """``(wider, chosen)``: the level :func:`narrowed_subset` keeps and the one before it.

    ``at_level[j]`` is how many candidates are at level ``j`` (see :func:`narrowed_subset`);
    a provider that counts its lines by level (a ``GROUP BY``) picks the same subset with it.
    """
    wider = chosen = 1  # level 1: every candidate
    for level in levels:
        wider, chosen = chosen, level
        if sum(n for held, n in at_level.items() if held >= level) <= CANDIDATE_BUDGET:
            break
    return wider, chosen


def narrowing(df: Sequence[int], budget: int = CANDIDATE_BUDGET) -> tuple[tuple[int, ...], list[int]]:
    """The narrower candidate sets to try when more than ``budget`` lines share a query term.

    ``df[i]`` is how many lines hold the query's ``i``-th term. Returns the rare terms
    (those in at most ``budget // 4`` lines, with their full weight in BM25) and the
    levels ``j`` = 2, 3, ...: level ``j`` keeps every line holding a rare term and, of
    the other lines, those holding at least ``j`` of the query's terms (a line holding
    one common term only is the weakest candidate BM25 knows). The caller takes the
    first level whose lines fit the budget. There are no levels when every term is rare,
    nor beyond the first ``j`` whose combinations of ``j`` terms number more than 64.
    """
    rare = tuple(i for i, d in enumerate(df) if d <= budget // 4)
    levels: list[int] = []
    if len(rare) < len(df):
        for j in range(2, len(df) + 1):
            if math.comb(len(df), j) > _MAX_COMBINATIONS:
                break
            levels.append(j)
    return rare, levels


_number: Final = attrgetter("number")
_joined: Final = attrgetter("joined")
_length: Final = attrgetter("length")
_counts: Final = attrgetter("counts")
_line_count: Final = attrgetter("line_count")
_total_length: Final = attrgetter("total_length")


@functools.lru_cache(maxsize=1 << 14)  # a partition's lines are candidates again and again
def _line_words(joined: str) -> str:
    """The index words of a line (:func:`stored_line`'s ``terms``) from its :attr:`IndexedLine.joined`."""
    return " ".join([_token_term(token, None) for token in joined.split()])


# -- ranking for database providers -----------------------------------------------
#
# A database provider stores each non-blank line with its index terms
# (:func:`stored_line`), lets its own index find candidate lines (every line of
# the searched partitions sharing an index term with the query), and ranks them
# with :func:`rank_candidates` over the statistics of the searched partitions
# alone. sqlite and postgres both rank this way, so they order the same lines
# the same way.

_PLAIN_TERM: Final = re.compile(r"[a-z0-9]+").fullmatch


def index_term(term: str, max_chars: int | None = None) -> str:
    """``term`` as one index word: ``[a-z0-9]+`` as is, anything else hex-encoded after ``_``.

    Plain ASCII words never contain ``_`` here, so the two forms cannot collide.
    With ``max_chars``, a term whose word would be that long or longer becomes
    ``_h`` and its sha256 (a PostgreSQL lexeme holds at most 2047 bytes).
    """
    if _PLAIN_TERM(term) and (max_chars is None or len(term) <= max_chars):
        return term
    encoded = term.encode("utf-8").hex()
    if max_chars is None or len(encoded) < max_chars:
        return "_" + encoded
    return "_h" + hashlib.sha256(term.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=1 << 16)  # a vocabulary repeats: most tokens of a retain are cache hits
def _token_term(token: str, max_chars: int | None) -> str:
    return index_term(stem(token), max_chars)


@frozen(kw_only=True)
class StoredLine:
    """One non-blank line as a database provider stores it: text, index words, length in terms."""

    number: int
    text: str
    terms: str
    length: int


def stored_line(number: int, line: str, max_chars: int | None = None) -> StoredLine | None:
    """The stored form of line ``number``, or ``None`` for a line without a word."""
    tokens = tokenize(line)
    if not tokens:
        return None
    length = sum(1 for t in tokens if t not in STOP_WORDS) or 1
    terms = " ".join(_token_term(t, max_chars) for t in tokens)
    return StoredLine(number=number, text=line, terms=terms, length=length)


def index_terms(query: Query, max_chars: int | None = None) -> tuple[str, ...]:
    """The index words a query searches for: its terms (stemmed non-stop words) without
    :data:`QUESTION_FRAME_TERMS`, unless those are all it has."""
    return tuple(dict.fromkeys(index_term(t, max_chars) for t in _searched(query)))


def _searched(query: Query) -> tuple[str, ...]:
    """The query's terms a search looks for (stems, unique): :func:`index_terms` before encoding."""
    return tuple(t for t in query.terms if t not in QUESTION_FRAME_TERMS) or query.terms


_MONTHS: Final = {
    name: number
    for number, name in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ),
        start=1,
    )
}
_MONTHS_ABBREVIATED: Final = {name[:3]: number for name, number in _MONTHS.items()} | {"sept": 9}
#: What a query's token begins with when it may be a month name (a cheap test before the regex).
_MONTH_PREFIXES: Final = frozenset(_MONTHS_ABBREVIATED)
_MONTH: Final = "|".join(sorted({*_MONTHS, *_MONTHS_ABBREVIATED}, key=len, reverse=True))
_DAY: Final = r"(\d{1,2})(?:st|nd|rd|th)?"
_NAMED_DATE: Final = re.compile(
    rf"\b(?:{_DAY}\s+({_MONTH})\.?,?\s+(\d{{4}})"  # 16 November, 2023
    rf"|({_MONTH})\.?\s+{_DAY},?\s+(\d{{4}})"  # November 16, 2023
    rf"|({_MONTH})\.?,?\s+(\d{{4}})"  # November 2023
    r"|(January|February|March|April|June|July|August|September|October|November|December))\b",  # June
    re.IGNORECASE,
)
_LABEL_DATE: Final = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})\.md$")

#: A date a query names: ``(year, month, day)`` for a day, ``(year, month, None)`` for a month of a
#: year, ``(None, month, None)`` for a month of any year.
NamedDate = tuple[int | None, int, int | None]


def query_dates(text: str) -> tuple[NamedDate, ...]:
    """The dates ``text`` names: a day ("16 November, 2023", "Nov 16th, 2023"), a month of a year
    ("October 2023"), or a month alone ("in June": the full name, capitalised, and never "May",
    which is more often the verb). A year alone names no date (it would cover nearly everything)."""
    found: list[NamedDate] = []
    for match in _NAMED_DATE.finditer(text):
        d1, m1, y1, m2, d2, y2, m3, y3, bare = match.groups()
        name = (m1 or m2 or m3 or bare).casefold()
        # Matching ignores case the Unicode way ("Aprİl"): a name that does not fold back is none.
        month = _MONTHS.get(name) or _MONTHS_ABBREVIATED.get(name)
        if month is None:
            continue
        if m1 or m2:
            found.append((int(y1 or y2), month, int(d1 or d2)))
        elif m3:
            found.append((int(y3), month, None))
        elif bare[0].isupper():
            found.append((None, month, None))
    return tuple(dict.fromkeys(found))


@functools.lru_cache(maxsize=1 << 12)  # a store has few daily documents, and recalls see them again
def _label_date(label: str) -> tuple[int, int, int] | None:
    found = _LABEL_DATE.search(label)
    if found is None:
        return None
    year, month, day = found.groups()
    return int(year), int(month), int(day)


def names_date(dates: Sequence[NamedDate], label: str) -> bool:
    """Whether ``label`` is a daily document (``daily/YYYY-MM-DD.md``) of one of ``dates``."""
    found = _label_date(label)
    if found is None:
        return False
    year, month, day = found
    return (year, month, day) in dates or (year, month, None) in dates or (None, month, None) in dates


#: One candidate line: ``(line id, document id, document label, line number, index words, length in terms)``.
Candidate = tuple[int, int, str, int, str, int]


def rank_candidates(
    query: Query,
    candidates: Iterable[Candidate],
    *,
    line_count: int,
    term_count: int,
    limit: int,
    texts: Callable[[Sequence[int]], Mapping[int, tuple[str, str]]],
    df: Sequence[int] | None = None,
    max_chars: int | None = None,
    term_counts: Sequence[dict[str, int]] | None = None,
) -> list[RecallSnippet]:
    """Score ``candidates`` (lines of the searched partitions sharing a query term), best first.

    Candidates carry no text: ``texts(line ids)`` returns each line's text and its
    document's digest, and is asked only for the lines that need it (those that
    may hold the query's phrase, best first, until ``limit`` are confirmed, and
    the lines returned). A candidate's index words are :func:`stored_line`'s for
    its text (with the same ``max_chars``); ``(document id, line number)`` names
    one candidate.

    :param line_count: indexed lines in the searched partitions and tiers.
    :param term_count: their total length in terms (for BM25's length norm).
    :param df: how many lines of the searched partitions hold each term, when
        ``candidates`` is a narrowed subset of them (default: counted in ``candidates``).
    :param max_chars: the provider's :func:`index_term` bound.
    :param term_counts: each candidate's term counts by stem (:attr:`IndexedLine.counts`), when the
        caller has them: the index words are then not scanned to count the query's terms.
    """
    wanted = index_terms(query, max_chars)
    if not wanted:
        return []
    rows = candidates if isinstance(candidates, list) else list(candidates)
    if not rows:
        return []
    # The rules, line by line (BM25 over the query's terms with labels, the best neighbour,
    # the document's coverage, phrase lines first), are those of the reference ranking in
    # core/tests/test_search_ranking.py, which a test compares this with. Here they run a
    # column at a time, in the named steps below: each step is one pass of C-level iterators
    # (map, zip, compress) over the candidates, arithmetic that depends on few values (a line's
    # term counts and length, a document's terms) is done once per distinct value, and the
    # neighbour signal only for lines that have a neighbour, all in the reference's order of
    # operations, so every float equals the reference's.
    line_ids, docs, labels, numbers, words, lengths = zip(*rows, strict=True)
    padded = [f" {w} " for w in words]
    columns = _term_columns(query, wanted, padded, term_counts)
    if len(columns.lines_holding_any) < len(padded):  # the index said it matched; trust only our own terms (P17)
        keep = [any(held) for held in zip(*columns.counts, strict=True)]
        return rank_candidates(
            query,
            list(compress(rows, keep)),
            line_count=line_count,
            term_count=term_count,
            limit=limit,
            texts=texts,
            df=df,
            max_chars=max_chars,
            term_counts=None if term_counts is None else list(compress(term_counts, keep)),
        )
    held = [len(found) for found in columns.holders]
    scored, idf = _term_weights(wanted, columns, df if df is not None else held, line_count)
    shapes = list(zip(*scored, lengths, strict=True))
    relative_of, own_of = _bm25_by_shape(shapes, idf, line_count=line_count, term_count=term_count, n=len(padded))
    weighted_cover = _document_cover(docs, columns.holders, idf)
    blended = _blend_neighbours(docs, numbers, shapes, relative_of, own_of, weighted_cover)
    _favour_named_dates(query, docs, labels, blended)
    # The floor keeps every returned line's rounded score above 0 (and phrase lines above 0.5).
    if min(blended) < 1e-5 or max(blended) > 1.0:
        blended = list(map(min, map(max, blended, repeat(1e-5)), repeat(1.0)))
    maybe = _may_hold_phrase(query, columns, padded, max_chars)
    return _best_lines(query, blended, maybe, labels, numbers, line_ids, limit=limit, texts=texts)


@frozen(kw_only=True)
class _TermColumns:
    """Each query term's count in each candidate line, and the positions of the lines holding it."""

    padded_terms: list[str]
    counts: list[list[int]]
    holders: list[list[int]]
    holding: list[list[str]]  # the padded index words of the lines holding each term

    @property
    def lines_holding_any(self) -> set[int]:
        return set(self.holders[0]) if len(self.holders) == 1 else set().union(*self.holders)


def _term_columns(
    query: Query, wanted: Sequence[str], padded: Sequence[str], term_counts: Sequence[dict[str, int]] | None
) -> _TermColumns:
    """Step 1: count each term in each line (one scan of each line, or the caller's term counts)."""
    n = len(padded)
    padded_terms = [f" {t} " for t in wanted]
    counts: list[list[int]] = []
    holders: list[list[int]] = []
    holding: list[list[str]] = []
    stems = _searched(query)
    for i, term in enumerate(padded_terms):
        if term_counts is not None:
            column = list(map(dict.get, term_counts, repeat(stems[i]), repeat(0)))
        else:
            column = list(map(str.count, padded, repeat(term, n)))
        found = list(compress(range(n), column))
        lines = list(map(padded.__getitem__, found))
        if found and term_counts is None:
            twice = f"{term}{wanted[i]} "
            if twice in "\n".join(lines):
                # Twice in a row ("very very"): str.count misses one, as both share a space.
                for j, line in zip(found, lines, strict=True):
                    if twice in line:
                        column[j] = line.split().count(wanted[i])
        counts.append(column)
        holders.append(found)
        holding.append(lines)
    return _TermColumns(padded_terms=padded_terms, counts=counts, holders=holders, holding=holding)


def _term_weights(
    wanted: Sequence[str], columns: _TermColumns, df: Sequence[int], line_count: int
) -> tuple[list[list[int]], list[float]]:
    """Step 2: each term's counts as scored (a label term counts once, where it begins a line) and its idf."""
    n = len(columns.counts[0])
    scored = list(columns.counts)
    label_terms: list[int] = []
    for i in range(len(wanted)):
        held = len(columns.holders[i])
        if held >= LABEL_MIN_LINES:
            begins = list(map(str.startswith, columns.holding[i], repeat(columns.padded_terms[i])))
            leading = begins.count(True)
            if leading >= LABEL_MIN_LINES and 2 * leading >= held:
                label_terms.append(i)
                scored[i] = [0] * n
                list(map(scored[i].__setitem__, compress(columns.holders[i], begins), repeat(1)))
    n_lines = max(line_count, n)
    idf = [math.log(1.0 + (n_lines - d + 0.5) / (d + 0.5)) for d in df]
    for i in label_terms:
        idf[i] = LABEL_IDF
    return scored, idf


def _bm25_by_shape(
    shapes: Sequence[tuple[int, ...]], idf: Sequence[float], *, line_count: int, term_count: int, n: int
) -> tuple[dict[tuple[int, ...], float], dict[tuple[int, ...], float]]:
    """Step 3: BM25 relative to the best the query could reach, once per distinct (term counts, length)
    shape, and its share in a line's own score: ``(relative_of, own_of)``."""
    n_lines = max(line_count, n)
    avg_len = max(term_count, 1) / max(n_lines, 1)
    best_possible = sum(idf) * (BM25_K1 + 1.0) or 1.0
    norm_a = BM25_K1 * (1.0 - CANDIDATE_BM25_B)
    norm_b = BM25_K1 * CANDIDATE_BM25_B / avg_len
    # Normalised up front: relative = sum(weight * tf / (tf + norm)), capped at 1.
    weight = [w * (BM25_K1 + 1.0) / best_possible for w in idf]
    own_weight = 1.0 - NEIGHBOUR_WEIGHT - DOCUMENT_WEIGHT
    indices = range(len(idf))
    relative_of: dict[tuple[int, ...], float] = {}
    own_of: dict[tuple[int, ...], float] = {}
    for shape in set(shapes):
        norm = norm_a + norm_b * shape[-1]
        score = 0.0
        for i in indices:
            tf = shape[i]
            if tf:
                score += weight[i] * tf / (tf + norm)
        relative_of[shape] = score = score if score < 1.0 else 1.0
        own_of[shape] = own_weight * score
    return relative_of, own_of


def _document_cover(docs: Sequence[int], holders: Sequence[list[int]], idf: Sequence[float]) -> dict[int, float]:
    """Step 4: each document's coverage of the query (the idf of the terms its candidate lines hold),
    weighted by DOCUMENT_WEIGHT; computed once per set of terms."""
    total_idf = sum(idf) or 1.0
    masks = dict.fromkeys(docs, 0)
    for i, found in enumerate(holders):
        bit = 1 << i
        for doc in set(map(docs.__getitem__, found)):
            masks[doc] |= bit
    cover_of: dict[int, float] = {}
    for mask in set(masks.values()):
        cover_of[mask] = sum(idf[i] for i in range(len(idf)) if mask >> i & 1) / total_idf
    return {doc: DOCUMENT_WEIGHT * cover_of[mask] for doc, mask in masks.items()}


def _blend_neighbours(
    docs: Sequence[int],
    numbers: Sequence[int],
    shapes: Sequence[tuple[int, ...]],
    relative_of: Mapping[tuple[int, ...], float],
    own_of: Mapping[tuple[int, ...], float],
    weighted_cover: Mapping[int, float],
) -> list[float]:
    """Step 5: a line's score from its own BM25, its best neighbour (one and two lines away in the same
    document) and its document's coverage."""
    n = len(docs)
    own_weight = 1.0 - NEIGHBOUR_WEIGHT - DOCUMENT_WEIGHT
    # Keys doc * span + line: a document's lines, and those up to two lines beyond them, never meet
    # another document's lines.
    span = max(numbers) - min(numbers) + 5
    keys = list(map(add, map(mul, docs, repeat(span)), numbers))
    relative = dict(zip(keys, map(relative_of.__getitem__, shapes), strict=True))
    ordered = sorted(keys)
    close = list(map(ge, repeat(2), map(sub, ordered[1:], ordered[:-1])))
    at: Sequence[int] = range(n)
    near: Sequence[int] = keys
    if 4 * close.count(True) >= n:  # most lines have a candidate within two lines: computed for every line
        blended = [0.0] * n
    else:
        # The others have none: own_weight * relative + NEIGHBOUR_WEIGHT * 0.0 + DOCUMENT_WEIGHT * cover,
        # and x + NEIGHBOUR_WEIGHT * 0.0 == x.
        blended = list(map(add, map(own_of.__getitem__, shapes), map(weighted_cover.__getitem__, docs)))
        with_one = set(compress(ordered[1:], close)).union(compress(ordered, close))
        at = list(compress(range(n), map(with_one.__contains__, keys)))
        near = list(map(keys.__getitem__, at))
    if at:
        get = relative.get
        neighbour = map(
            max,
            map(get, map(sub, near, repeat(1)), repeat(0.0)),
            map(get, map(add, near, repeat(1)), repeat(0.0)),
            map(mul, repeat(SECOND_NEIGHBOUR), map(get, map(sub, near, repeat(2)), repeat(0.0))),
            map(mul, repeat(SECOND_NEIGHBOUR), map(get, map(add, near, repeat(2)), repeat(0.0))),
        )
        own = map(mul, repeat(own_weight), map(relative.__getitem__, near))
        cover = map(weighted_cover.__getitem__, map(docs.__getitem__, at))
        with_neighbour = map(add, map(add, own, map(mul, repeat(NEIGHBOUR_WEIGHT), neighbour)), cover)
        list(map(blended.__setitem__, at, with_neighbour))
    return blended


def _favour_named_dates(query: Query, docs: Sequence[int], labels: Sequence[str], blended: list[float]) -> None:
    """Step 6: lines of daily documents of a date the query names gain DATE_WEIGHT (no date named,
    the common case, costs nothing more)."""
    dates = query_dates(query.text) if not _MONTH_PREFIXES.isdisjoint(t[:3] for t in query.phrase) else ()
    if dates:
        dated = {doc for doc, label in dict(zip(docs, labels, strict=True)).items() if names_date(dates, label)}
        for i, doc in enumerate(docs):
            if doc in dated:
                blended[i] += DATE_WEIGHT


def _may_hold_phrase(query: Query, columns: _TermColumns, padded: Sequence[str], max_chars: int | None) -> list[int]:
    """Step 7: the lines that may hold the query's phrase: those holding every term, their index words
    in the phrase's order (only reading a line's text can confirm it)."""
    holders = columns.holders
    if len(holders) == 1:
        every = holders[0]
    else:
        every = sorted(set(holders[0]).intersection(*holders[1:]))
    phrase_words = f" {' '.join(_token_term(t, max_chars) for t in query.phrase)} "
    if phrase_words in columns.padded_terms:  # a one-word phrase: every line holding the terms holds its word
        return every
    if query.phrase:
        return list(compress(every, map(str.__contains__, map(padded.__getitem__, every), repeat(phrase_words))))
    return []


def _best_lines(
    query: Query,
    blended: Sequence[float],
    maybe: Sequence[int],
    labels: Sequence[str],
    numbers: Sequence[int],
    line_ids: Sequence[int],
    *,
    limit: int,
    texts: Callable[[Sequence[int]], Mapping[int, tuple[str, str]]],
) -> list[RecallSnippet]:
    """Step 8: confirm phrase lines best first (reading their text) until ``limit`` hold it, rank them
    above the lines that only share terms, and build the hits (reading only the lines returned)."""
    n = len(blended)
    # (-blended, label, line, line id): best first in natural order.
    maybe_phrase = sorted(_entries(maybe, blended, labels, numbers, line_ids))
    # Of the other lines, only those at least as good as the limit-th best can be among the best `limit`.
    others = blended
    if maybe:
        others = list(blended)
        list(map(others.__setitem__, maybe, repeat(-1.0)))  # scores are above 0: -1 is never chosen
    chosen: Sequence[int] = range(n)
    if n - len(maybe) > limit:
        floor = sorted(others)[-max(limit, 1)]
        chosen = list(compress(range(n), map(ge, others, repeat(floor))))
    elif maybe:
        chosen = list(compress(range(n), map(ge, others, repeat(0.0))))
    terms_only = _entries(chosen, blended, labels, numbers, line_ids)
    phrase_hits: list[tuple[float, str, int, int]] = []
    line_text: dict[int, tuple[str, str]] = {}
    phrase = query.phrase
    size = max(limit, 1)
    for start in range(0, len(maybe_phrase), size):
        if len(phrase_hits) >= limit:
            break
        batch = maybe_phrase[start : start + size]
        line_text.update(texts([item[3] for item in batch]))
        for negated, label, number, lid in batch:
            if _holds_phrase(line_text[lid][0].casefold(), phrase):
                phrase_hits.append((PHRASE_FLOOR - (1.0 - PHRASE_FLOOR) * negated, label, number, lid))
            else:
                terms_only.append((negated, label, number, lid))
    # Lines never read come after `limit` confirmed phrase lines with higher scores: none can make the cut.
    best_terms = heapq.nsmallest(limit, terms_only)
    missing = [item[3] for item in best_terms if item[3] not in line_text]
    if missing:
        line_text.update(texts(missing))
    ranked = phrase_hits + [(-TERM_CEILING * neg, label, number, lid) for neg, label, number, lid in best_terms]
    ranked.sort(key=lambda item: (-item[0], item[1], item[2]))
    return [
        RecallSnippet(
            source=source,
            line=number,
            snippet=snippet_around(line_text[lid][0], query),
            score=round(score, 6),
            digest=line_text[lid][1],
        )
        for score, source, number, lid in ranked[:limit]
    ]


def _entries(
    at: Sequence[int], blended: Sequence[float], labels: Sequence[str], numbers: Sequence[int], ids: Sequence[int]
) -> list[tuple[float, str, int, int]]:
    """``(-blended, label, line, line id)`` of the candidates at positions ``at``."""
    return list(
        zip(
            map(neg, map(blended.__getitem__, at)),
            map(labels.__getitem__, at),
            map(numbers.__getitem__, at),
            map(ids.__getitem__, at),
            strict=True,
        )
    )


def _is_word(char: str) -> bool:
    """Whether ``char`` is a word character of :func:`tokenize` (``\\w``: alphanumeric or ``_``)."""
    return char.isalnum() or char == "_"


def _holds_phrase(text: str, phrase: Sequence[str]) -> bool:
    """Whether :func:`tokenize` finds ``phrase`` consecutively in case-folded ``text``
    (:func:`contains_phrase` on its tokens), without tokenising the whole text.

    A token is a maximal run of word characters: the phrase's first token is looked up
    where it is such a run, and each next token must be the run after the non-word
    characters that follow.
    """
    if not phrase:
        return False
    first, end_of_text = phrase[0], len(text)
    at = text.find(first)
    while at >= 0:
        end = at + len(first)
        if (at == 0 or not _is_word(text[at - 1])) and (end == end_of_text or not _is_word(text[end])):
            for token in phrase[1:]:
                while end < end_of_text and not _is_word(text[end]):
                    end += 1
                if not text.startswith(token, end):
                    break
                end += len(token)
                if end < end_of_text and _is_word(text[end]):
                    break
            else:
                return True
        at = text.find(first, at + 1)
    return False


# -- recall by meaning: one fusion for every provider (contract P36-P40) --------------------
#
# A provider declaring ``vectors`` ranks a request carrying ``RecallRequest.vector`` in three
# steps: its lexical ranking as usual, but FUSION_DEPTH deep (:func:`search` or
# :func:`rank_candidates` with ``limit=FUSION_DEPTH``); the cosine of the query with every line of
# the searched partitions that has a vector of the query's model (:func:`similarities`: the best
# VECTOR_DEPTH, and the lexical hits'); then :func:`fuse`. The same store gives the same hits
# whichever provider holds it.

#: Lexical hits a fused recall starts from (the lexical evidence of a line ranked below counts as 0).
FUSION_DEPTH: Final = 50
#: Lines closest in meaning a fused recall considers, whatever words they share.
VECTOR_DEPTH: Final = 50
#: A line's meaning score is its cosine similarity to the query above SIMILARITY_FLOOR, scaled to [0, 1]:
#: unrelated sentences of the default model sit below it. Chosen on LoCoMo conversations 0-4 and the
#: tuning half of the paraphrase set only (docs/performance.md).
SIMILARITY_FLOOR: Final = 0.10
#: The share of a term line's fused score taken from its meaning (the rest from its lexical score).
#: Chosen like SIMILARITY_FLOOR.
MEANING_WEIGHT: Final = 0.30

#: ``(document label, line number)``: one line of a recall.
LineRef = tuple[str, int]


def similarities(
    query: QueryVector,
    lines: Sequence[LineRef],
    vectors: npt.NDArray[np.float32],
    lexical: Iterable[RecallSnippet] = (),
    depth: int = VECTOR_DEPTH,
) -> dict[LineRef, float]:
    """The cosine of ``query`` with the best ``depth`` of ``lines`` and with every lexical hit's line.

    ``vectors[i]`` is the stored vector of ``lines[i]`` (of the query's model only: never
    mix models, P38), as :func:`memvault.contract.embedding.vectors_from_bytes` reads it.
    Computed in float64, and ties broken by label and line, so every provider picks the same
    lines from the same store.
    """
    import numpy as np

    if not len(lines):
        return {}
    if vectors.shape != (len(lines), query.dimensions):
        raise ValueError(f"vectors of shape {vectors.shape} for {len(lines)} lines of {query.dimensions} dimensions")
    cosine = np.round(vectors.astype(np.float64) @ query.values.astype(np.float64), 6)
    # The best `depth` by cosine, ties by (label, line): every line at least as close as the depth-th
    # closest is a contender (ties included), and only those few are sorted in Python.
    if len(lines) > depth:
        kth = np.partition(cosine, len(lines) - depth)[len(lines) - depth]
        contenders = np.flatnonzero(cosine >= kth).tolist()
    else:
        contenders = list(range(len(lines)))
    values = cosine.tolist()
    contenders.sort(key=lambda i: (-values[i], lines[i]))
    chosen = {lines[i]: values[i] for i in contenders[:depth]}
    wanted = {(hit.source, hit.line) for hit in lexical}.difference(chosen)
    if wanted:
        for i, ref in enumerate(lines):
            if ref in wanted:
                chosen[ref] = values[i]
    return chosen


def meaning_score(similarity: float) -> float:
    """A cosine similarity as a meaning score in [0, 1] (0 at or below :data:`SIMILARITY_FLOOR`)."""
    return min(1.0, max(0.0, (similarity - SIMILARITY_FLOOR) / (1.0 - SIMILARITY_FLOOR)))


def fuse(
    query: Query,
    lexical: Sequence[RecallSnippet],
    similar: Mapping[LineRef, float],
    texts: Callable[[Sequence[LineRef]], Mapping[LineRef, tuple[str, str]]],
    limit: int,
) -> list[RecallSnippet]:
    """The best ``limit`` lines by words and meaning together, best first (contract P36, P39).

    :param lexical: the lexical ranking's hits, :data:`FUSION_DEPTH` deep.
    :param similar: :func:`similarities`' cosines.
    :param texts: each requested line's text and its document's digest (asked only for
        lines found by meaning alone, and only for those returned).

    A line holding the query's phrase keeps its lexical score (above 0.5: phrase lines still
    rank first, P17). Any other line scores in (0, TERM_CEILING]: ``TERM_CEILING`` times
    ``(1 - MEANING_WEIGHT)`` of its lexical score (relative to TERM_CEILING) plus
    ``MEANING_WEIGHT`` of its :func:`meaning_score`. A line not embedded yet keeps its lexical
    score; a line sharing no term is returned only when its meaning score is above 0. Each
    hit carries its parts (``lexical``, ``similarity``).
    """
    by_line = {(hit.source, hit.line): hit for hit in lexical}
    scored: list[tuple[float, str, int]] = []
    for ref in set(by_line).union(similar):
        hit = by_line.get(ref)
        lexical_score = hit.score if hit is not None else 0.0
        cosine = similar.get(ref)
        if lexical_score > PHRASE_FLOOR or cosine is None:
            fused = lexical_score
        else:
            fused = TERM_CEILING * (
                (1.0 - MEANING_WEIGHT) * min(lexical_score / TERM_CEILING, 1.0) + MEANING_WEIGHT * meaning_score(cosine)
            )
        if fused > 0.0:
            scored.append((round(max(fused, 1e-5), 6), *ref))
    scored.sort(key=lambda item: (-item[0], item[1], item[2]))
    best = scored[: max(limit, 0)]
    missing = [(source, line) for _, source, line in best if (source, line) not in by_line]
    found = texts(missing) if missing else {}
    out: list[RecallSnippet] = []
    for score, source, line in best:
        ref = (source, line)
        cosine = similar.get(ref)
        meaning = None if cosine is None else min(1.0, max(0.0, cosine))
        if ref in by_line:
            hit = by_line[ref]
            out.append(evolve(hit, score=score, lexical=hit.score, similarity=meaning))
        elif ref in found:
            text_, digest = found[ref]
            snippet = snippet_around(text_, query)
            out.append(
                RecallSnippet(
                    source=source,
                    line=line,
                    snippet=snippet,
                    score=score,
                    digest=digest,
                    lexical=0.0,
                    similarity=meaning,
                )
            )
    return out
