"""The parity suite's split injections: each half passes alone, whichever scanner judges it.

A provider whose service scans upstream judges with the service's scanner, which judges by meaning too
when an embedder is installed there (issue 36). The halves must then still pass one by one, or the suite
fails a provider for its service's embedder rather than for what it does with the halves.
"""

from __future__ import annotations

import pytest

import memvault
from memvault_parity.scan_together import SPLIT_PAYLOADS


@pytest.mark.parametrize("payload", list(SPLIT_PAYLOADS))
def test_each_half_is_stored_and_the_two_together_are_rejected(payload: str) -> None:
    first, second, _query = SPLIT_PAYLOADS[payload]
    with memvault.open("memory") as vault:  # the default scanner, by meaning too where an embedder is installed
        for half in (first, second):
            vault.retain(
                memvault.RetainRequest(workspace_id="ws", tier="AGENT", agent_id="a", content=half, mode="replace")
            )
        with pytest.raises(memvault.ContentRejected):
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="ws", tier="AGENT", agent_id="a", content=first + second, mode="replace"
                )
            )
