"""Deprecated: memvault 0.1.0's path of the search engine; removed in memvault 1.0.0.

It moved to :mod:`memvault.search`. Every name this module exported in memvault
0.1.0 still resolves to the same object, and the first use warns once
(:class:`memvault.MemvaultRemovedIn1Warning`) naming where to import it from. Import public names from :mod:`memvault`.

May import: anything (an old path sits on top, like :mod:`memvault`); nothing imports it.
"""

from __future__ import annotations

from memvault.contract.deprecation import forward


def _terms(text: str) -> list[str]:
    """Search terms of ``text``: stemmed tokens without stop words (memvault 0.1.0's ``terms``)."""
    from memvault.contract.terms import STOP_WORDS, stem, tokenize

    return [stem(t) for t in tokenize(text) if t not in STOP_WORDS]


_MOVED = {
    **dict.fromkeys(
        (
            "BM25_B",
            "BM25_K1",
            "DOCUMENT_WEIGHT",
            "IndexedDocument",
            "IndexedLine",
            "NEIGHBOUR_WEIGHT",
            "PHRASE_FLOOR",
            "Query",
            "SECOND_NEIGHBOUR",
            "STOP_WORDS",
            "SearchableDocument",
            "TERM_CEILING",
            "contains_phrase",
            "index_document",
            "search",
            "snippet_around",
            "stem",
            "tokenize",
        ),
        "memvault.search",
    ),
}

#: Names memvault 0.1.0 had here with no object left to forward to: kept as they were.
_KEPT = {
    "terms": (
        _terms,
        "write [stem(t) for t in tokenize(text) if t not in STOP_WORDS] (all three are in memvault.contract.terms)",
    )
}

__all__ = sorted({*_MOVED, *_KEPT})

__getattr__, __dir__ = forward(__name__, _MOVED, replacements=_KEPT)
