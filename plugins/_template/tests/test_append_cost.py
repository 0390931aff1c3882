"""An append to the template's document indexes what it adds, not the whole document."""

from __future__ import annotations

import time

import memvault
from memvault import search as text


def test_an_append_costs_what_it_adds() -> None:
    # The 300th append to one document costs a fraction of indexing that document (it
    # re-tokenised the whole document before: more than indexing it).
    line = "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.\n"
    with memvault.open("template-provider", scanner="off") as vault:

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
    whole = []
    for _ in range(5):
        start = time.perf_counter()
        text.index_document("daily/2024-01-01.md", line * 320)
        whole.append(time.perf_counter() - start)
    assert [hit.line for hit in hits.hits] == [1, 2, 3]
    assert late < min(whole) / 4, (
        f"append to a 320-line document {late * 1e6:.0f} us, indexing it {min(whole) * 1e6:.0f} us"
    )
