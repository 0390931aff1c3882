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

from memvault.search import CANDIDATE_BUDGET, narrowing

__all__ = ["CANDIDATE_BUDGET", "fts_query", "narrowed_queries"]


def narrowed_queries(terms: Sequence[str], df: Sequence[int], budget: int = CANDIDATE_BUDGET) -> list[str]:
    """FTS5 queries that find fewer, better candidates than the OR of all ``terms``, most inclusive first.

    The levels of :func:`memvault.search.narrowing` (the rule :func:`memvault.search.search`
    applies too, so the memory and local-disk providers keep the same lines): query ``j``
    keeps every line holding a rare term and, of the other lines, those holding at least
    ``j`` of the query's terms. The caller picks the first query whose matches fit the budget.
    """
    rare, levels = narrowing(df, budget)
    any_rare = [f'"{terms[i]}"' for i in rare]
    return [
        " OR ".join([*any_rare, *(f"({_all_of(combo)})" for combo in itertools.combinations(terms, j))]) for j in levels
    ]


def _all_of(terms: Sequence[str]) -> str:
    return " AND ".join(f'"{t}"' for t in terms)


def fts_query(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression: the terms OR-ed, each quoted (terms are ``[a-z0-9_]+``)."""
    return " OR ".join(f'"{t}"' for t in terms)
