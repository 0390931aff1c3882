"""The Vault facade over the `memory` provider: the verbs end to end."""

from __future__ import annotations

import memvault


def test_retain_then_recall_finds_the_line(vault: memvault.Vault) -> None:
    vault.retain(
        memvault.RetainRequest(
            workspace_id="w1", agent_id="a1", tier="AGENT", content="Prefers metric units.\n", mode="append"
        )
    )
    result = vault.recall(memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="units"))
    assert [(h.source, h.line) for h in result.hits] == [("AGENT.md", 1)]
