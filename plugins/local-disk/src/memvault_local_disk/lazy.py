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
"run"), so every token whose stem is ``term`` starts with ``term`` without its
last letter.

A query of many terms (up to 128, P14) would scan the whole text once per term
and index every line a short probe occurs in; after :data:`SCANS_BEFORE_WORDS`
terms a document lists its distinct words once instead (a few passes in C), and
each further term costs a look-up among them (the words starting with its probe)
and a search for the whole words that stem to it, each occurrence a line that
holds the term: no line is tokenised to confirm it. Both ways give the same lines.
"""

from __future__ import annotations

import hashlib
import re
import string
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Final

from memvault import search as text
from memvault.contract import terms as vocabulary

__all__ = ["SCANS_BEFORE_WORDS", "LazyDocument"]

#: Terms a document answers by scanning its text before it lists its words for the rest: listing
#: them costs about as much as five scans, and a recall's few terms never pay for it.
SCANS_BEFORE_WORDS: Final = 4

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


def _counts(stems: Iterator[str]) -> dict[str, int]:
    """How often each stem occurs: ``dict(Counter(stems))`` without Counter's per-call overhead
    (its ``isinstance`` check against ``Mapping`` cost more than the counting, once per candidate line)."""
    counts: dict[str, int] = {}
    for one in stems:
        counts[one] = counts.get(one, 0) + 1
    return counts


def _probe(term: str) -> str:
    return term[:-1] if len(term) >= 3 else term


#: What is not part of a word (``\w``) nor a line break, for text that is not ASCII.
_NON_WORD: Final = re.compile(r"[^\w\n]")


class _Words:
    """A document's words: its text with every character that is not part of a word made a space,
    each line padded with a space on either side (so ``" word "`` finds exactly the whole word),
    where each line starts in it, and its distinct words, sorted."""

    __slots__ = ("distinct", "padded", "starts")

    def __init__(self, folded: str) -> None:
        if folded.isascii():
            spaced = folded.encode("ascii").translate(_ASCII_BLANKS).decode("ascii")
        else:
            spaced = _NON_WORD.sub(" ", folded)
        lines = spaced.split("\n")
        self.padded = "\n".join(f" {line} " for line in lines)
        self.starts = [0, *accumulate(len(line) + 3 for line in lines)]
        self.distinct = sorted(set(self.padded.split()))

    def positions(self, term: str) -> tuple[int, ...]:
        """The lines holding a word whose stem is ``term``."""
        probe = _probe(term)
        distinct = self.distinct
        padded = self.padded
        starts = self.starts
        found: set[int] = set()
        at = bisect_left(distinct, probe)
        while at < len(distinct) and distinct[at].startswith(probe):
            word = distinct[at]
            at += 1
            if vocabulary.stem(word) != term:
                continue
            needle = f" {word} "
            hit = padded.find(needle)
            while hit >= 0:
                position = bisect_right(starts, hit) - 1
                found.add(position)
                hit = padded.find(needle, starts[position + 1])
        return tuple(sorted(found)) if found else ()


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
        "_words",
        "digest",
        "line_count",
        "source",
        "total_length",
    )

    def __init__(self, source: str, body: str, *, digest: str = "") -> None:
        self.source = source
        #: The body's sha256 (``digest`` when the caller has it), reported with recall hits so the
        #: scanner needs no read-back.
        self.digest = digest or hashlib.sha256(body.encode("utf-8")).hexdigest()
        self._lines = body.splitlines()
        folded_lines = [line.casefold() for line in self._lines]
        self._folded = "\n".join(folded_lines)
        self.line_count, self.total_length = _statistics(self._folded, folded_lines)
        self._starts = [0, *accumulate(len(line) + 1 for line in folded_lines)]
        self._postings: dict[str, tuple[int, ...]] = {}
        self._indexed: dict[int, text.IndexedLine | None] = {}
        self._words: _Words | None = None
        self._lock = threading.Lock()

    def forked(self) -> None:
        """In a forked child (P35): a lock of its own, not one held by a thread the child lost."""
        self._lock = threading.Lock()

    def positions(self, term: str) -> Sequence[int]:
        found = self._postings.get(term)
        if found is None:
            if len(self._postings) < SCANS_BEFORE_WORDS:
                found = self._scan(term)
            else:
                words = self._words
                if words is None:
                    words = _Words(self._folded)  # two threads may both build it: the same value
                    self._words = words
                found = words.positions(term)
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
                counts=_counts(map(vocabulary.stem, tokens)),
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
