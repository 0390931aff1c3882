"""A document indexed only as far as the queries asked so far need.

:func:`memvault.search.index_document` tokenises and stems every line, which for
a year of daily notes (10 MB) takes seconds in Python. A recall only needs, per
document, the number of non-blank lines and their total length (for BM25's
statistics) and the lines holding the query's terms. :class:`LazyDocument`
computes the statistics with one cheap pass, finds a term's lines by substring
search over the case-folded text, confirms each candidate by indexing that line
the way :func:`memvault.search.index_document` does, and keeps every answer for the next
query. The results equal a full index's (a property test checks it).

Why a substring search finds every line: the stemmer only strips a suffix and
may change the final letter of what remains ("flies" -> "fly", "running" ->
"run"), so every token whose stem is ``term`` contains ``term`` without its
last letter.
"""

from __future__ import annotations

import hashlib
import string
import threading
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from itertools import accumulate
from typing import Final

from memvault import search as text
from memvault.contract import terms as vocabulary

__all__ = ["LazyDocument"]

_is_stop_word = vocabulary.STOP_WORDS.__contains__


# For ASCII text, r"\w+" tokens are the runs of [A-Za-z0-9_]: mapping every other byte
# but the line break to a space and splitting gives the same tokens several times faster.
_WORD_BYTES: Final = frozenset((string.ascii_letters + string.digits + "_").encode())
_ASCII_BLANKS: Final = bytes(b if b in _WORD_BYTES or b == 0x0A else 0x20 for b in range(256))
_is_stop_word_bytes: Final = frozenset(w.encode() for w in vocabulary.STOP_WORDS).__contains__


def _statistics(folded: str, folded_lines: list[str]) -> tuple[int, int]:
    """How many lines have tokens, and the sum of their lengths, as index_document counts them.

    A line's length is its number of non-stop-word tokens, at least 1.
    """
    count = 0
    total = 0
    if folded.isascii():
        for byte_tokens in map(bytes.split, folded.encode("ascii").translate(_ASCII_BLANKS).split(b"\n")):
            if byte_tokens:
                count += 1
                total += (len(byte_tokens) - sum(map(_is_stop_word_bytes, byte_tokens))) or 1
        return count, total
    for tokens in map(vocabulary.tokenize, folded_lines):
        if tokens:
            count += 1
            total += (len(tokens) - sum(map(_is_stop_word, tokens))) or 1
    return count, total


def _probe(term: str) -> str:
    return term[:-1] if len(term) >= 3 else term


class LazyDocument:
    """One document body, answering :class:`memvault.search.SearchableDocument` lazily.

    Positions are 0-based line indexes in ``body.splitlines()``.
    """

    __slots__ = (
        "_folded",
        "_indexed",
        "_lines",
        "_lock",
        "_postings",
        "_starts",
        "digest",
        "line_count",
        "source",
        "total_length",
    )

    def __init__(self, source: str, body: str) -> None:
        self.source = source
        #: The body's sha256, reported with recall hits so the scanner needs no read-back.
        self.digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
        self._lines = body.splitlines()
        folded_lines = [line.casefold() for line in self._lines]
        self._folded = "\n".join(folded_lines)
        self.line_count, self.total_length = _statistics(self._folded, folded_lines)
        self._starts = [0, *accumulate(len(line) + 1 for line in folded_lines)]
        self._postings: dict[str, tuple[int, ...]] = {}
        self._indexed: dict[int, text.IndexedLine | None] = {}
        self._lock = threading.Lock()

    def positions(self, term: str) -> Sequence[int]:
        found = self._postings.get(term)
        if found is None:
            found = self._scan(term)
            with self._lock:
                self._postings[term] = found
        return found

    def line(self, position: int) -> text.IndexedLine:
        indexed = self._index_line(position)
        if indexed is None:  # only positions() results are asked for, and those lines have tokens
            raise IndexError(f"line {position + 1} of {self.source} has no tokens")
        return indexed

    def _index_line(self, position: int) -> text.IndexedLine | None:
        if position in self._indexed:
            return self._indexed[position]
        line = self._lines[position]
        tokens = vocabulary.tokenize(line)
        indexed = None
        if tokens:  # built as text.index_document builds a line (the property test holds the two equal)
            indexed = text.IndexedLine(
                number=position + 1,
                text=line,
                joined=f" {' '.join(tokens)} ",
                counts=dict(Counter(map(vocabulary.stem, tokens))),
                length=(len(tokens) - sum(map(_is_stop_word, tokens))) or 1,
            )
        with self._lock:
            self._indexed[position] = indexed
        return indexed

    def _scan(self, term: str) -> tuple[int, ...]:
        probe = _probe(term)
        folded = self._folded
        starts = self._starts
        found: list[int] = []
        at = folded.find(probe)
        while at >= 0:
            position = bisect_right(starts, at) - 1
            if term in map(vocabulary.stem, vocabulary.tokenize(self._lines[position])):  # what index_document counts
                found.append(position)
            at = folded.find(probe, starts[position + 1])
        return tuple(found)
