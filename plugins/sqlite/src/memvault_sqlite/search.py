"""Index terms and ranking for the sqlite provider.

FTS5 only finds candidates: every line of the searched partitions that shares
an index term with the query. Scores are computed here, over the statistics of
the searched partitions alone (never the whole database), so a recall costs
what its own partition costs and scores do not drift with other tenants' data.

Index terms are :func:`memvault.contract.vocabulary.tokenize` tokens reduced by
:func:`memvault.contract.vocabulary.stem`, written as FTS-safe ASCII words (see
:func:`fts_token`), so FTS5 never tokenises or stems anything itself and the
candidate set is exactly "lines sharing a term". A query reaches FTS5 only as
an ``OR`` of quoted index terms built here, never as user-written syntax.

Scoring (all in [0, 1], monotonic in relevance):

* a line holding the query's words consecutively (``memvault.search``'s phrase,
  case-insensitive) scores in (0.5, 1];
* other candidate lines score in (0, 0.5): BM25 over the partition's lines,
  normalised by the best score the query could reach, plus two context
  signals that help conversational memories (:data:`memvault.search.NEIGHBOUR_WEIGHT`,
  :data:`memvault.search.SECOND_NEIGHBOUR`, :data:`memvault.search.DOCUMENT_WEIGHT`),
  the same constants the postgres provider ranks with.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
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

__all__ = [
    "CANDIDATE_BUDGET",
    "IndexedLine",
    "Row",
    "fts_query",
    "fts_token",
    "index_line",
    "narrowed_queries",
    "query_terms",
    "rank",
]

_plain_word: Final = re.compile(r"[a-z0-9]+").fullmatch


def fts_token(term: str) -> str:
    """``term`` as one FTS5 ``ascii`` token: ``[a-z0-9]+`` as is, anything else hex-encoded after ``_``.

    Plain ASCII words never contain ``_`` here, so the two forms cannot collide.
    """
    if _plain_word(term):
        return term
    return "_" + term.encode("utf-8").hex()


@frozen(kw_only=True)
class IndexedLine:
    """One non-blank line as stored: its text, FTS terms and length in terms."""

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
    return IndexedLine(number=number, text=line, terms=" ".join(map(_index_term, tokens)), length=length)


@functools.lru_cache(maxsize=1 << 16)  # a vocabulary repeats: most tokens of a retain are cache hits
def _index_term(token: str) -> str:
    return fts_token(vocabulary.stem(token))


def query_terms(query: text.Query) -> tuple[str, ...]:
    """The index terms a query searches for (its stemmed non-stop words)."""
    return tuple(dict.fromkeys(fts_token(t) for t in query.terms))


#: Above this many candidate lines a recall scores a bounded subset (see :func:`narrowed_queries`).
CANDIDATE_BUDGET: Final = 1000
#: At most this many AND-clauses in one narrowed FTS5 query.
_MAX_CLAUSES: Final = 64


def narrowed_queries(terms: Sequence[str], df: Sequence[int], budget: int = CANDIDATE_BUDGET) -> list[str]:
    """FTS5 queries that find fewer, better candidates than the OR of all ``terms``, most inclusive first.

    Query ``j`` keeps every line holding a rare term (one in at most ``budget // 4``
    lines, with its full weight in BM25) and, of the other lines, those holding at
    least ``j`` of the query's terms (``j`` = 2, 3, ...). A line holding one common
    term only is the weakest candidate BM25 knows; the caller picks the first query
    whose matches fit the budget.
    """
    rare = [t for t, d in zip(terms, df, strict=True) if d <= budget // 4]
    common = [t for t in terms if t not in rare]
    queries: list[str] = []
    for j in range(2, len(terms) + 1):
        clauses = [" AND ".join(f'"{t}"' for t in combo) for combo in itertools.combinations(terms, j)]
        if len(clauses) > _MAX_CLAUSES or not common:
            break
        queries.append(" OR ".join([*(f'"{t}"' for t in rare), *(f"({c})" for c in clauses)]))
    return queries


def fts_query(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression: the terms OR-ed, each quoted (terms are ``[a-z0-9_]+``)."""
    return " OR ".join(f'"{t}"' for t in terms)


#: One candidate line as the recall query returns it:
#: ``(line id, document id, document label, line number, index terms, length in terms)``.
Row = tuple[int, int, str, int, str, int]


def rank(
    query: text.Query,
    candidates: Iterable[Row],
    *,
    line_count: int,
    term_count: int,
    limit: int,
    texts: Callable[[Sequence[int]], Mapping[int, tuple[str, str]]],
    df: Sequence[int] | None = None,
) -> list[RecallSnippet]:
    """Score ``candidates`` (lines of the searched partitions sharing a query term).

    Rows carry no text: ``texts`` reads it, with the digest of the line's
    document, for the few lines that need it (the lines that may hold the
    query's phrase, best first, until ``limit`` are confirmed, and the lines
    returned).

    :param line_count: indexed lines in the searched partitions and tiers.
    :param term_count: their total length in terms (for BM25's length norm).
    :param df: how many lines of the searched partitions hold each term, when
        ``candidates`` is a narrowed subset of them (default: counted in ``candidates``).
    """
    wanted = query_terms(query)
    if not wanted:
        return []
    padded_terms = tuple(f" {t} " for t in wanted)
    # Adjacent repeats ("very very") share a space, so str.count misses one: those are split and counted.
    doubled = tuple(f" {t} {t} " for t in wanted)
    indices = range(len(wanted))
    rows: list[tuple[Row, list[int], int]] = []
    masks: Counter[int] = Counter()
    for row in candidates:
        padded = f" {row[4]} "
        counts = [padded.count(t) for t in padded_terms]
        mask = 0
        for i in indices:
            if counts[i]:
                mask |= 1 << i
                if doubled[i] in padded:
                    counts[i] = padded.split().count(wanted[i])
        if not mask:  # FTS said it matched; trust only our own terms (P17)
            continue
        masks[mask] += 1
        rows.append((row, counts, mask))
    if not rows:
        return []
    if df is None:
        df = [sum(n for mask, n in masks.items() if mask >> i & 1) for i in indices]
    n_lines = max(line_count, len(rows))
    avg_len = max(term_count, 1) / max(n_lines, 1)
    idf = [math.log(1.0 + (n_lines - d + 0.5) / (d + 0.5)) for d in df]
    best_possible = sum(idf) * (BM25_K1 + 1.0) or 1.0
    total_idf = sum(idf) or 1.0
    norm_a = BM25_K1 * (1.0 - BM25_B)
    norm_b = BM25_K1 * BM25_B / avg_len
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
            if contains_phrase(vocabulary.tokenize(line_text[lid][0]), query.phrase):
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
            snippet=text.snippet_around(line_text[lid][0], query),
            score=round(score, 6),
            digest=line_text[lid][1],
        )
        for score, source, number, lid in scored[:limit]
    ]
