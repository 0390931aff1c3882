"""What the postgres provider asks PostgreSQL: lexemes per line and ``tsquery`` literals.

PostgreSQL only finds candidates: a GIN index over one ``tsvector`` per line
returns every line of the searched partition that shares an index word with
the query. Lines are stored and ranked by the core's search engine
(:func:`memvault.search.stored_line`, :func:`memvault.search.rank_candidates`,
the ranking the sqlite provider uses too), over the statistics of the searched
partitions alone, so both providers order the same lines the same way.

Index words are :func:`memvault.search.index_term` words bounded by
:data:`MAX_TERM`. PostgreSQL never parses or stems them itself: a line's
``tsvector`` is ``array_to_tsvector`` of its words, each prefixed with the
partition's id (``"<pid>.<term>"``), so one GIN lookup is already local to the
partition. A query reaches PostgreSQL only as a ``tsquery`` of quoted index
words built here, never as user-written syntax. Above
:data:`memvault.search.CANDIDATE_BUDGET` matching lines a recall scores the
subset :func:`memvault.search.narrowing` picks, as sqlite does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

__all__ = ["MAX_TERM", "lexemes", "ts_query"]

#: The longest index word a lexeme carries as itself; longer ones become ``_h`` and their sha256
#: (:func:`memvault.search.index_term`), because a ``tsvector`` lexeme holds at most 2047 bytes.
MAX_TERM: Final = 200


def lexemes(pid: int, terms: str) -> list[str]:
    """The ``tsvector`` lexemes of a stored line of partition ``pid``."""
    return [f"{pid}.{t}" for t in dict.fromkeys(terms.split())]


def ts_query(pid: int, terms: Sequence[str]) -> str:
    """A ``tsquery`` literal: the partition's terms OR-ed, each quoted (terms are ``[a-z0-9_]``)."""
    return " | ".join(f"'{pid}.{t}'" for t in terms)
