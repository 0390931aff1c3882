"""memvault: pluggable long-term memory for AI agents.

Open a provider and call its four verbs::

    import memvault
    vault = memvault.open("memory")
    vault.retain(memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="AGENT",
                                        content="Prefers metric units.", mode="append"))
    hits = vault.recall(memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="units"))
"""

from __future__ import annotations

from memvault import errors
from memvault.errors import (
    CapExceeded,
    ContentRejected,
    InvalidRequest,
    MemvaultError,
    NotSupported,
    PluginError,
    ProviderNotFound,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
)
from memvault.markers import hookimpl, hookspec
from memvault.models import (
    Capability,
    DocumentInfo,
    ForgetRequest,
    ForgetResult,
    HealthStatus,
    ListDocumentsRequest,
    ListDocumentsResult,
    Mode,
    Quarantine,
    ReadRequest,
    ReadResult,
    RecallRequest,
    RecallResult,
    RecallSnippet,
    RetainRequest,
    RetainResult,
    Tier,
)
from memvault.vault import (
    AsyncVault,
    Vault,
    open,  # noqa: A004 - memvault.open mirrors the builtin on purpose
    open_async,
    open_configured,
    open_from_config,
    settings_from_pairs,
)

__all__ = [
    "AsyncVault",
    "CapExceeded",
    "Capability",
    "ContentRejected",
    "DocumentInfo",
    "ForgetRequest",
    "ForgetResult",
    "HealthStatus",
    "InvalidRequest",
    "ListDocumentsRequest",
    "ListDocumentsResult",
    "MemvaultError",
    "Mode",
    "NotSupported",
    "PluginError",
    "ProviderNotFound",
    "Quarantine",
    "ReadRequest",
    "ReadResult",
    "RecallRequest",
    "RecallResult",
    "RecallSnippet",
    "RetainRequest",
    "RetainResult",
    "Tier",
    "Unauthorized",
    "UpstreamError",
    "UpstreamTimeout",
    "Vault",
    "errors",
    "hookimpl",
    "hookspec",
    "open",
    "open_async",
    "open_configured",
    "open_from_config",
    "settings_from_pairs",
]
