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

import functools
import hashlib
import heapq
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, Protocol

from attrs import evolve, field, frozen

from memvault.contract.models import MAX_SNIPPET_CHARS, RecallSnippet
from memvault.contract.terms import STOP_WORDS, query_terms, stem, tokenize

__all__ = [
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
    "index_document",
    "names_date",
    "query_dates",
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
#: BM25's length normalisation in the database providers' ranking (the memory search keeps
#: BM25_B): a long line is penalised less, chosen on LoCoMo conversations 0-4 only.
CANDIDATE_BM25_B: Final = 0.30
#: Label terms (the database providers' ranking): a query term that begins at least
#: LABEL_MIN_LINES candidate lines, and at least half of the candidate lines holding it, labels
#: lines ("Caroline: ..." in a transcript, a speaker's name). It counts only where it begins a
#: line (a name inside a line is someone else talking to or about them), with a fixed idf of
#: LABEL_IDF. Chosen on LoCoMo conversations 0-4 only (docs/performance.md).
LABEL_MIN_LINES: Final = 20
LABEL_IDF: Final = 1.0
#: Stemmed words that frame a question rather than name what it is about ("what *kind* of",
#: "how *long*", "did she *mention*") and light verbs ("*go* to", "*take* part"): the database
#: providers do not search for them unless a query has nothing else. Chosen on LoCoMo
#: conversations 0-4 only (docs/performance.md).
QUESTION_FRAME_TERMS: Final = frozenset(
    {"kind", "type", "many", "recent", "long", "mention", "describe", "say", "ever", "go", "get", "make", "take"}
)

#: A query naming a date ("on 16 November, 2023", "in October 2023", "in June") favours the lines
#: of the daily documents of that day or month (labels ``daily/YYYY-MM-DD.md``, contract P4): the
#: database providers add DATE_WEIGHT to their score (see :func:`query_dates`). Chosen on LoCoMo
#: conversations 0-4 only (docs/performance.md).
DATE_WEIGHT: Final = 0.10

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
    terms = [t for t in query.terms if t not in QUESTION_FRAME_TERMS] or query.terms
    return tuple(dict.fromkeys(index_term(t, max_chars) for t in terms))


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
) -> list[RecallSnippet]:
    """Score ``candidates`` (lines of the searched partitions sharing a query term), best first.

    Candidates carry no text: ``texts(line ids)`` returns each line's text and its
    document's digest, and is asked only for the lines that need it (those that
    may hold the query's phrase, best first, until ``limit`` are confirmed, and
    the lines returned).

    :param line_count: indexed lines in the searched partitions and tiers.
    :param term_count: their total length in terms (for BM25's length norm).
    :param df: how many lines of the searched partitions hold each term, when
        ``candidates`` is a narrowed subset of them (default: counted in ``candidates``).
    :param max_chars: the provider's :func:`index_term` bound.
    """
    wanted = index_terms(query, max_chars)
    if not wanted:
        return []
    padded_terms = tuple(f" {t} " for t in wanted)
    # Adjacent repeats ("very very") share a space, so str.count misses one: those are split and counted.
    doubled = tuple(f" {t} {t} " for t in wanted)
    indices = range(len(wanted))
    rows: list[tuple[Candidate, list[int], int]] = []
    masks: Counter[int] = Counter()
    # How many candidate lines begin with each term, and which term each line begins with.
    leading: Counter[int] = Counter()
    for row in candidates:
        padded = f" {row[4]} "
        counts = [padded.count(t) for t in padded_terms]
        mask = 0
        for i in indices:
            if counts[i]:
                mask |= 1 << i
                if doubled[i] in padded:
                    counts[i] = padded.split().count(wanted[i])
                if padded.startswith(padded_terms[i]):
                    leading[i] += 1
        if not mask:  # the index said it matched; trust only our own terms (P17)
            continue
        masks[mask] += 1
        rows.append((row, counts, mask))
    if not rows:
        return []
    held = [sum(n for mask, n in masks.items() if mask >> i & 1) for i in indices]
    if df is None:
        df = held
    labels = [i for i in indices if leading[i] >= LABEL_MIN_LINES and 2 * leading[i] >= held[i]]
    for row, counts, _mask in rows:
        for i in labels:
            if counts[i]:  # a label counts once, where it begins the line, and nowhere else
                counts[i] = 1 if f"{row[4]} ".startswith(padded_terms[i][1:]) else 0
    n_lines = max(line_count, len(rows))
    avg_len = max(term_count, 1) / max(n_lines, 1)
    idf = [math.log(1.0 + (n_lines - d + 0.5) / (d + 0.5)) for d in df]
    for i in labels:
        idf[i] = LABEL_IDF
    best_possible = sum(idf) * (BM25_K1 + 1.0) or 1.0
    total_idf = sum(idf) or 1.0
    norm_a = BM25_K1 * (1.0 - CANDIDATE_BM25_B)
    norm_b = BM25_K1 * CANDIDATE_BM25_B / avg_len
    # Normalised up front: relative = sum(weight * tf / (tf + norm)), capped at 1.
    weight = [w * (BM25_K1 + 1.0) / best_possible for w in idf]

    relative: dict[tuple[int, int], float] = {}
    covered: dict[int, int] = {}
    for row, counts, mask in rows:
        norm = norm_a + norm_b * row[5]
        score = 0.0
        for i in indices:
            tf = counts[i]
            if tf:
                score += weight[i] * tf / (tf + norm)
        relative[(row[1], row[3])] = score if score < 1.0 else 1.0
        covered[row[1]] = covered.get(row[1], 0) | mask
    doc_cover = {doc: sum(idf[i] for i in indices if mask >> i & 1) / total_idf for doc, mask in covered.items()}

    own_weight = 1.0 - NEIGHBOUR_WEIGHT - DOCUMENT_WEIGHT
    # Documents of a date the query names (none: no query date, the common case, costs nothing more).
    dates = query_dates(query.text) if not _MONTH_PREFIXES.isdisjoint(t[:3] for t in query.phrase) else ()
    dated: set[int] = set()
    if dates:
        labels_of = {row[1]: row[2] for row, _counts, _mask in rows}
        dated = {doc for doc, label in labels_of.items() if names_date(dates, label)}
    get = relative.get
    everything = (1 << len(wanted)) - 1
    # (-blended, label, line, line id): best first in natural order; phrase candidates kept apart.
    maybe_phrase: list[tuple[float, str, int, int]] = []
    terms_only: list[tuple[float, str, int, int]] = []
    for row, _counts, mask in rows:
        doc, number = row[1], row[3]
        neighbour = max(
            get((doc, number - 1), 0.0),
            get((doc, number + 1), 0.0),
            SECOND_NEIGHBOUR * get((doc, number - 2), 0.0),
            SECOND_NEIGHBOUR * get((doc, number + 2), 0.0),
        )
        blended = own_weight * relative[(doc, number)] + NEIGHBOUR_WEIGHT * neighbour + DOCUMENT_WEIGHT * doc_cover[doc]
        if doc in dated:
            blended += DATE_WEIGHT
        # The floor keeps every returned line's rounded score above 0 (and phrase lines above 0.5).
        blended = min(max(blended, 1e-5), 1.0)
        (maybe_phrase if mask == everything else terms_only).append((-blended, row[2], number, row[0]))

    # Only a line holding every query term can hold the phrase: read and tokenise those,
    # best first, until `limit` of them hold it (or none are left).
    maybe_phrase.sort()
    phrase_hits: list[tuple[float, str, int, int]] = []
    line_text: dict[int, tuple[str, str]] = {}
    for start in range(0, len(maybe_phrase), max(limit, 1)):
        if len(phrase_hits) >= limit:
            break
        batch = maybe_phrase[start : start + max(limit, 1)]
        line_text.update(texts([item[3] for item in batch]))
        for negated, label, number, lid in batch:
            if contains_phrase(tokenize(line_text[lid][0]), query.phrase):
                phrase_hits.append((PHRASE_FLOOR - (1.0 - PHRASE_FLOOR) * negated, label, number, lid))
            else:
                terms_only.append((negated, label, number, lid))
    # Lines never read come after `limit` confirmed phrase lines with higher scores: none can make the cut.
    best_terms = heapq.nsmallest(limit, terms_only)
    missing = [item[3] for item in best_terms if item[3] not in line_text]
    if missing:
        line_text.update(texts(missing))
    scored = phrase_hits + [(-TERM_CEILING * neg, label, number, lid) for neg, label, number, lid in best_terms]
    scored.sort(key=lambda item: (-item[0], item[1], item[2]))
    return [
        RecallSnippet(
            source=source,
            line=number,
            snippet=snippet_around(line_text[lid][0], query),
            score=round(score, 6),
            digest=line_text[lid][1],
        )
        for score, source, number, lid in scored[:limit]
    ]
