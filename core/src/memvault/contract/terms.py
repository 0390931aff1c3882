"""Layer 1: what a search term is (contract P14, P17).

A query's terms are its case-folded word tokens without stop words (unless
the query is only stop words), reduced by a light English stemmer. The query
bound (P14: at most 128 distinct terms) counts these, and every provider's
ranking uses the same definition.

May import: nothing of memvault.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Final

__all__ = ["STOP_WORDS", "query_terms", "stem", "tokenize"]

_TOKEN: Final = re.compile(r"\w+", re.UNICODE)

_STOP_WORDS_TEXT: Final = """a about above after again against all am an and any are aren as at be because been
    before being below between both but by can cannot could couldn did didn do does doesn
    doing don down during each few for from further had hadn has hasn have haven having he
    her here hers herself him himself his how i if in into is isn it its itself just let
    me more most mustn my myself no nor not of off on once only or other ought our ours
    ourselves out over own same shan she should shouldn so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was wasn we were weren what when where which while who whom why will with won
    would wouldn you your yours yourself yourselves s t d ll m re ve y"""
STOP_WORDS: Final = frozenset(_STOP_WORDS_TEXT.split())


#: For ASCII text: upper-case letters to lower case, every byte ``\w`` does not match to a space.
_ASCII_WORDS: Final = bytes(
    (c + 32 if 65 <= c <= 90 else c) if chr(c).isalnum() or c == 95 else 32 for c in range(128)
) + bytes(range(128, 256))


def tokenize(text: str) -> list[str]:
    """Case-folded word tokens (letters, digits, underscore) in order."""
    if text.isascii():  # the same tokens, three times faster: one byte translation and a split
        return text.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split()
    return _TOKEN.findall(text.casefold())


@functools.lru_cache(maxsize=1 << 16)  # a vocabulary repeats: indexing a big corpus is mostly cache hits
def stem(token: str) -> str:
    """A light English suffix stemmer: plurals, -ing, -ed, -ly, -ies, -ness, -ment."""
    if len(token) <= 3 or not token.isalpha():
        return token
    for suffix, repl, min_stem in (
        ("sses", "ss", 2),
        ("ies", "y", 2),
        ("ness", "", 3),
        ("ments", "", 3),
        ("ment", "", 3),
        ("ingly", "", 3),
        ("edly", "", 3),
        ("ing", "", 3),
        ("ed", "", 3),
        ("ly", "", 3),
        ("es", "", 3),
        ("s", "", 3),
    ):
        if token.endswith(suffix) and len(token) - len(suffix) >= min_stem:
            if suffix == "s" and token.endswith(("ss", "us", "is")):
                return token
            if suffix == "es" and not token.endswith(("ches", "shes", "xes", "zes", "sses", "oes")):
                # "prefers"/"makes": only the "s" is a suffix
                return token[:-1]
            base = token[: len(token) - len(suffix)] + repl
            if len(base) >= 2 and base[-1] == base[-2] and base[-1] not in "lsz" and suffix in ("ing", "ed"):
                base = base[:-1]  # "running" -> "run"
            return base
    return token


def query_terms(tokens: Sequence[str]) -> tuple[str, ...]:
    """The distinct search terms of a query's ``tokens``, in order: stemmed, stop words
    dropped unless the query has nothing else."""
    wanted = [stem(t) for t in tokens if t not in STOP_WORDS] or [stem(t) for t in tokens]
    return tuple(dict.fromkeys(wanted))
