"""What the sqlite provider asks FTS5: candidate queries over index words.

FTS5 only finds candidates: every line of the searched partitions that shares
an index word with the query. Lines are stored and ranked by the core's
search engine (:func:`memvault.search.stored_line`,
:func:`memvault.search.rank_candidates`, the ranking the postgres provider
uses too), over the statistics of the searched partitions alone, so a recall
costs what its own partition costs and scores do not drift with other
tenants' data.

Index words (:func:`memvault.search.index_term`) are FTS-safe ASCII, so FTS5
never tokenises or stems anything itself and the candidate set is exactly
"lines sharing a term". A query reaches FTS5 only as an ``OR`` of quoted index
words built here, never as user-written syntax. For a common-word query on a
big partition, :func:`narrowed_queries` trades the weakest candidates for a
bounded scoring cost.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Final

__all__ = ["CANDIDATE_BUDGET", "fts_query", "narrowed_queries"]

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
