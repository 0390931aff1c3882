"""Index terms and ranking for the postgres provider.

PostgreSQL only finds candidates: a GIN index over one ``tsvector`` per line
returns every line of the searched partition that shares an index term with the
query. Scores are computed here, over the statistics of the searched partitions
alone (never the whole database), so a recall costs what its own partition costs
and scores do not drift with other tenants' data. The ranking is the sqlite
provider's (the same BM25 with phrase and context signals), so both providers
order the same lines the same way.

Index terms are :func:`memvault.contract.vocabulary.tokenize` tokens reduced by
:func:`memvault.contract.vocabulary.stem`, written as ``[a-z0-9_]`` words (see
:func:`index_token`). PostgreSQL never parses or stems them itself: a line's
``tsvector`` is ``array_to_tsvector`` of its terms, each prefixed with the
partition's id (``"<pid>.<term>"``), so one GIN lookup is already local to the
partition. A query reaches PostgreSQL only as a ``tsquery`` of quoted index
terms built here, never as user-written syntax.

Scoring (all in [0, 1], monotonic in relevance):

* a line holding the query's words consecutively (``memvault.search``'s phrase,
  case-insensitive) scores in (0.5, 1];
* other candidate lines score in (0, 0.5): BM25 over the partition's lines,
  normalised by the best score the query could reach, plus two context
  signals that help conversational memories (:data:`memvault.search.NEIGHBOUR_WEIGHT`,
  :data:`memvault.search.SECOND_NEIGHBOUR`, :data:`memvault.search.DOCUMENT_WEIGHT`),
  the same constants the sqlite provider ranks with.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from attrs import frozen

from memvault import search as text
from memvault.contract import terms as vocabulary
from memvault.contract.models import RecallSnippet
from memvault.search import (
    BM25_B,
    BM25_K1,
    DOCUMENT_WEIGHT,
    NEIGHBOUR_WEIGHT,
    PHRASE_FLOOR,
    SECOND_NEIGHBOUR,
    TERM_CEILING,
    contains_phrase,
)

__all__ = ["Candidate", "IndexedLine", "index_line", "index_token", "lexemes", "query_terms", "rank", "ts_query"]

_ASCII_WORD: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_MAX_TERM: Final = 200


def index_token(term: str) -> str:
    """``term`` as one index term: ``[a-z0-9]+`` as is, anything else hex-encoded after ``_``.

    Plain ASCII words never contain ``_`` here, so the two forms cannot collide.
    A term longer than :data:`_MAX_TERM` characters becomes ``_h`` and its
    sha256, because a ``tsvector`` lexeme holds at most 2047 bytes.
    """
    if term and len(term) <= _MAX_TERM and all(ch in _ASCII_WORD for ch in term):
        return term
    encoded = term.encode("utf-8").hex()
    if len(encoded) < _MAX_TERM:
        return "_" + encoded
    return "_h" + hashlib.sha256(term.encode("utf-8")).hexdigest()


def lexemes(pid: int, terms: str) -> list[str]:
    """The ``tsvector`` lexemes of a stored line of partition ``pid``."""
    return [f"{pid}.{t}" for t in dict.fromkeys(terms.split())]


def ts_query(pid: int, terms: Sequence[str]) -> str:
    """A ``tsquery`` literal: the partition's terms OR-ed, each quoted (terms are ``[a-z0-9_]``)."""
    return " | ".join(f"'{pid}.{t}'" for t in terms)


@frozen(kw_only=True)
class IndexedLine:
    """One non-blank line as stored: its text, index terms and length in terms."""

    number: int
    text: str
    terms: str
    length: int


def index_line(number: int, line: str) -> IndexedLine | None:
    """The stored form of one line, or ``None`` for a line without a word."""
    tokens = vocabulary.tokenize(line)
    if not tokens:
        return None
    length = sum(1 for t in tokens if t not in vocabulary.STOP_WORDS) or 1
    terms = " ".join(index_token(vocabulary.stem(t)) for t in tokens)
    return IndexedLine(number=number, text=line, terms=terms, length=length)


def query_terms(query: text.Query) -> tuple[str, ...]:
    """The index terms a query searches for (its stemmed non-stop words)."""
    return tuple(dict.fromkeys(index_token(t) for t in query.terms))


@frozen(kw_only=True)
class Candidate:
    """A line the GIN index returned: where it is and its text."""

    document: int
    source: str
    number: int
    text: str
    terms: str
    length: int


def rank(
    query: text.Query,
    candidates: Iterable[Candidate],
    *,
    line_count: int,
    term_count: int,
    limit: int,
) -> list[RecallSnippet]:
    """Score ``candidates`` (lines of the searched partitions sharing a query term).

    :param line_count: indexed lines in the searched partitions and tiers.
    :param term_count: their total length in terms (for BM25's length norm).
    """
    wanted = query_terms(query)
    if not wanted:
        return []
    rows: list[tuple[Candidate, dict[str, int]]] = []
    df: Counter[str] = Counter()
    for cand in candidates:
        line_terms = cand.terms.split()
        counts = {t: c for t in wanted if (c := line_terms.count(t))}
        if not counts:  # the index said it matched; trust only our own terms (P17)
            continue
        df.update(counts.keys())
        rows.append((cand, counts))
    if not rows:
        return []
    n_lines = max(line_count, len(rows))
    avg_len = max(term_count, 1) / max(n_lines, 1)
    idf = {t: math.log(1.0 + (n_lines - df[t] + 0.5) / (df[t] + 0.5)) for t in wanted}
    best_possible = sum(idf.values()) * (BM25_K1 + 1.0) or 1.0
    total_idf = sum(idf.values()) or 1.0

    relative: dict[tuple[int, int], float] = {}
    covered: dict[int, set[str]] = {}
    for cand, counts in rows:
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * cand.length / avg_len)
        bm25 = 0.0
        for term in wanted:
            tf = counts.get(term)
            if tf:
                bm25 += idf[term] * tf * (BM25_K1 + 1.0) / (tf + norm)
                covered.setdefault(cand.document, set()).add(term)
        relative[(cand.document, cand.number)] = min(bm25 / best_possible, 1.0)
    doc_cover = {doc: sum(idf[t] for t in terms) / total_idf for doc, terms in covered.items()}

    scored: list[tuple[float, str, int, str]] = []
    own_weight = 1.0 - NEIGHBOUR_WEIGHT - DOCUMENT_WEIGHT
    for cand, counts in rows:
        key = (cand.document, cand.number)
        neighbour = max(
            relative.get((cand.document, cand.number - 1), 0.0),
            relative.get((cand.document, cand.number + 1), 0.0),
            SECOND_NEIGHBOUR * relative.get((cand.document, cand.number - 2), 0.0),
            SECOND_NEIGHBOUR * relative.get((cand.document, cand.number + 2), 0.0),
        )
        blended = own_weight * relative[key] + NEIGHBOUR_WEIGHT * neighbour + DOCUMENT_WEIGHT * doc_cover[cand.document]
        # The floor keeps every returned line's rounded score above 0 (and phrase lines above 0.5).
        blended = min(max(blended, 1e-5), 1.0)
        # Only a line holding every query term can hold the phrase: tokenise just those.
        if len(counts) == len(wanted) and contains_phrase(vocabulary.tokenize(cand.text), query.phrase):
            score = PHRASE_FLOOR + (1.0 - PHRASE_FLOOR) * blended
        else:
            score = TERM_CEILING * blended
        scored.append((score, cand.source, cand.number, cand.text))
    scored.sort(key=lambda item: (-item[0], item[1], item[2]))
    return [
        RecallSnippet(source=source, line=number, snippet=text.snippet_around(line, query), score=round(score, 6))
        for score, source, number, line in scored[:limit]
    ]
