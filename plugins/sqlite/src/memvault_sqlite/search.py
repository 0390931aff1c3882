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
from collections.abc import Callable, Sequence

from memvault.search import CANDIDATE_BUDGET, narrowing

__all__ = ["CANDIDATE_BUDGET", "first_fitting", "fts_query", "likely_first_fitting", "narrowed_queries"]


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


def likely_first_fitting(df: Sequence[int], line_count: int, budget: int = CANDIDATE_BUDGET) -> int:
    """Which of :func:`narrowed_queries` is likely the first to fit ``budget``: its index, estimated
    as if the terms fell on lines independently (``df[i]`` of the ``line_count`` lines hold term ``i``).

    Only a starting point for :func:`first_fitting`: a wrong guess costs counts, never other lines.
    """
    rare, levels = narrowing(df, budget)
    if not levels:
        return 0
    lines = max(line_count, max(df), 1)
    chances = [min(d / lines, 1.0) for d in df]
    # How many of the other terms a line holds: the distribution of a sum of independent coins.
    held = [1.0]
    no_rare = 1.0
    for i, p in enumerate(chances):
        if i in rare:
            no_rare *= 1.0 - p
            continue
        held = [a * (1.0 - p) + b * p for a, b in zip([*held, 0.0], [0.0, *held], strict=True)]
    for k, level in enumerate(levels):
        # A line is kept at this level when it holds a rare term or at least `level` of the others.
        if lines * (1.0 - no_rare * sum(held[:level])) <= budget:
            return k
    return len(levels) - 1


def first_fitting(count: Callable[[int], int], n: int, start: int, budget: int = CANDIDATE_BUDGET) -> tuple[int, bool]:
    """The first of ``n`` nested candidate sets that fits ``budget``: ``(index, True)``, or
    ``(n - 1, False)`` when none does.

    ``count(k)`` is the size of set ``k``, which holds every later set (so sizes never grow
    with ``k``). Counting starts at ``start`` and walks toward the answer, one set at a
    time: a right guess costs two counts (one when it is the first set), where counting
    from the first set costs one per set passed over, and the sets passed over first are the
    widest and dearest.

    :raises ValueError: when ``n`` is below 1 (there is no set to pick).
    """
    if n < 1:
        raise ValueError(f"first_fitting needs at least one candidate set, got n={n}")
    k = min(max(start, 0), n - 1)
    if count(k) <= budget:
        while k > 0 and count(k - 1) <= budget:
            k -= 1
        return k, True
    while k + 1 < n:
        k += 1
        if count(k) <= budget:
            return k, True
    return n - 1, False


def _all_of(terms: Sequence[str]) -> str:
    return " AND ".join(f'"{t}"' for t in terms)


def fts_query(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression: the terms OR-ed, each quoted (terms are ``[a-z0-9_]+``)."""
    return " OR ".join(f'"{t}"' for t in terms)
