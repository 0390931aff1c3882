"""``index_appended`` equals ``index_document`` on the final body, field by field (P17, P18).

The memory provider and the template index an append incrementally; a hit, a
score or a snippet that differed from a whole reindex would be a different
answer for the same documents on another provider (tests/test_same_ranking.py).
"""

from __future__ import annotations

import time

import attrs
from hypothesis import example, given, settings
from hypothesis import strategies as st

import memvault
from memvault import search as text

# Line breaks splitlines() knows (a "\r" an appended "\n" may join), blank lines, stop words, stems.
_piece = st.one_of(
    st.sampled_from(["Caroline", "runs", "running", "the", "café", "CAFÉ", "x1", "—", " ", "?", "boxes"]),
    st.sampled_from(["\n", "\r", "\r\n", "\n\n", "\u2028", "\u2029", "\x0b", "\x0c", "\x85", "\x1c", "\x1d", "\x1e"]),
)
_text = st.lists(_piece, max_size=30).map("".join)


def _fields(doc: text.IndexedDocument) -> tuple[object, ...]:
    # IndexedDocument compares without its postings and IndexedLine without its counts: compare all.
    return (
        doc.source,
        [(ln.number, ln.text, ln.joined, ln.counts, ln.length) for ln in doc.lines],
        doc.postings,
        doc.total_length,
        doc.body_lines,
    )


@settings(max_examples=400, deadline=None)
@given(stored=_text, appended=st.lists(_text, min_size=1, max_size=4), counted=st.booleans())
@example(stored="Caroline runs\r", appended=["\nthe café"], counted=False)  # "\r" + "\n" is one line break
@example(stored="Caroline runs", appended=[" running\n"], counted=False)  # the last line goes on
@example(stored="café\n\n", appended=["\n\nboxes\n"], counted=True)  # blank lines still count
@example(stored="x1\n", appended=[""], counted=False)  # an empty append
# A last line longer than the 4,096 characters searched first for its start, and a break just before them.
@example(stored="café\n" + "runs " * 1000, appended=["boxes\n"], counted=False)
@example(stored="café\r\n" + "runs " * 1000, appended=["boxes\n"], counted=True)
@example(stored="runs " * 1000, appended=["\rboxes"], counted=True)
def test_equals_a_whole_reindex(stored: str, appended: list[str], counted: bool) -> None:
    body = stored
    index = text.index_document("daily/2024-01-01.md", body)
    for more in appended:
        if counted:  # an index that does not know its body's line count (built by hand): counted from the body
            index = attrs.evolve(index, body_lines=-1)
        index = text.index_appended(index, body, body + more)
        body += more
        assert _fields(index) == _fields(text.index_document("daily/2024-01-01.md", body))


@given(stored=_text, replaced=_text)
def test_a_body_that_does_not_extend_is_indexed_whole(stored: str, replaced: str) -> None:
    index = text.index_document("crew/notes.md", stored)
    assert _fields(text.index_appended(index, stored, replaced)) == _fields(
        text.index_document("crew/notes.md", replaced)
    )


def test_the_previous_index_is_left_as_it_was() -> None:
    index = text.index_document("daily/2024-01-01.md", "alpha beta\ngamma")
    before = _fields(index)
    text.index_appended(index, "alpha beta\ngamma", "alpha beta\ngamma delta\nalpha")
    assert _fields(index) == before


def test_a_memory_append_costs_what_it_adds() -> None:
    # The 300th append to one document costs a fraction of indexing that document (it re-tokenised
    # the whole document before: more than indexing it).
    late, whole, lines = late_append_and_whole_index("memory")
    assert lines == [1, 2, 3]
    assert late < whole / 4, f"append to a 320-line document {late * 1e6:.0f} us, indexing it {whole * 1e6:.0f} us"


def late_append_and_whole_index(provider: str) -> tuple[float, float, list[int]]:
    """A typical append's time to a 320-line document, the time indexing that document whole
    takes, and the lines a recall finds."""
    line = "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.\n"
    with memvault.open(provider, scanner="off") as vault:

        def append() -> float:
            request = memvault.RetainRequest(
                workspace_id="w", agent_id="a", tier="daily", key="2024-01-01", content=line, mode="append"
            )
            start = time.perf_counter()
            vault.retain(request)
            return time.perf_counter() - start

        for _ in range(300):
            append()
        late = sorted(append() for _ in range(20))[5]
        hits = vault.recall(memvault.RecallRequest(workspace_id="w", agent_id="a", query="support group", limit=3))
    body = line * 320
    whole = []
    for _ in range(5):
        start = time.perf_counter()
        text.index_document("daily/2024-01-01.md", body)
        whole.append(time.perf_counter() - start)
    return late, min(whole), [hit.line for hit in hits.hits]
