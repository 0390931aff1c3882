"""Small helpers shared by the sqlite plugin's tests."""

from __future__ import annotations

import memvault


def retain(vault: memvault.Vault, content: str, *, tier: str = "AGENT", mode: str = "append", **kw: str) -> None:
    kw.setdefault("workspace_id", "w1")
    if tier != "CREW":
        kw.setdefault("agent_id", "a1")
    vault.retain(memvault.RetainRequest(tier=tier, content=content, mode=mode, **kw))


def recall(vault: memvault.Vault, query: str, **kw: object) -> list[memvault.RecallSnippet]:
    kw.setdefault("workspace_id", "w1")
    kw.setdefault("agent_id", "a1")
    return vault.recall(memvault.RecallRequest(query=query, **kw)).hits  # type: ignore[arg-type]
