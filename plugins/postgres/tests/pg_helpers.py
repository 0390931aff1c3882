"""Small helpers shared by the postgres provider's tests."""

from __future__ import annotations

import memvault


def put(
    vault: memvault.Vault,
    content: str,
    *,
    ws: str = "w1",
    tier: str = "AGENT",
    subject: str = "",
    key: str = "",
    mode: str = "append",
) -> memvault.RetainResult:
    return vault.retain(
        memvault.RetainRequest(
            workspace_id=ws, agent_id="a1", tier=tier, key=key, content=content, mode=mode, data_subject_id=subject
        )
    )


def body(vault: memvault.Vault, *, ws: str = "w1", tier: str = "AGENT", key: str = "") -> str:
    return vault.read(memvault.ReadRequest(workspace_id=ws, agent_id="a1", tier=tier, key=key)).content


def recall(vault: memvault.Vault, query: str, *, ws: str = "w1") -> list[memvault.RecallSnippet]:
    return vault.recall(memvault.RecallRequest(workspace_id=ws, agent_id="a1", query=query)).hits


def erase(vault: memvault.Vault, subject: str, *, ws: str = "w1") -> int:
    return vault.forget(memvault.ForgetRequest(workspace_id=ws, data_subject_id=subject)).removed
