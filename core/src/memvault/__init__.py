"""memvault: pluggable long-term memory for AI agents.

Open a provider and call its four verbs::

    import memvault
    vault = memvault.open("memory")
    vault.retain(memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="AGENT",
                                        content="Prefers metric units.", mode="append"))
    hits = vault.recall(memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="units"))

This package's namespace is the public API, and the one import path a plugin
author needs: the contract types and errors, the hook markers, the
registration protocols, the shared provider rules (labels, caps, digests) and
the facade. The layers behind it, each importing only from those below
(checked by a test):

1. :mod:`memvault.contract`: types, errors, terms, the wire converter;
2. :mod:`memvault.hooks`: the hook specifications, one module per plugin manager;
3. :mod:`memvault.registry`: discovery, built-in plugins by dotted name, hook tracing;
4. :mod:`memvault.vault` and :mod:`memvault.config`: the facade;
5. built-in plugins: :mod:`memvault.providers.memory`, :mod:`memvault.scanner`,
   :mod:`memvault.default_lifecycle`, and :mod:`memvault.search` (the search engine);
6. :mod:`memvault.lifecycle` (the runtime), :mod:`memvault.transfer`, :mod:`memvault.doctor`;
7. :mod:`memvault.cli`: the ``memvault`` command.

No module of memvault imports this package's namespace; it imports the layers.
"""

from __future__ import annotations

import sys as _sys

from memvault.contract import errors
from memvault.contract.deprecation import MemvaultDeprecationWarning, MemvaultRemovedIn1Warning
from memvault.contract.embedding import (
    Embedder,
    PendingLine,
    QueryVector,
    RegisterEmbedder,
    line_digest,
    vector_bytes,
    vectors_from_bytes,
)
from memvault.contract.errors import (
    CapExceeded,
    CompactionFailed,
    ContentRejected,
    IdempotencyConflict,
    InvalidRequest,
    LifecycleError,
    MemvaultError,
    NotesConflict,
    NotSupported,
    PluginError,
    ProviderNotFound,
    ReplayConflict,
    TurnCancelled,
    TurnFailed,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
)
from memvault.contract.forking import after_fork_in_child
from memvault.contract.lifecycle import (
    LifecycleContext,
    MemoryVerbs,
    Message,
    RecalledMessage,
    RecallOutcome,
    ScopeContext,
    SlotOptions,
    Tool,
)
from memvault.contract.models import (
    CAPS,
    Capability,
    DocumentInfo,
    ForgetRequest,
    ForgetResult,
    HealthStatus,
    ListDocumentsRequest,
    ListDocumentsResult,
    Mode,
    Partition,
    Quarantine,
    QuarantineRecord,
    ReadRequest,
    ReadResult,
    RecallRequest,
    RecallResult,
    RecallSnippet,
    RetainRequest,
    RetainResult,
    StoredBody,
    Tier,
    body_sha256,
    cap_warning,
    check_cap,
    label_for,
    parse_label,
    today_utc,
    validate_identifier,
)
from memvault.contract.registration import (
    DoctorCheck,
    RegisterProvider,
    RegisterScanner,
    ScratchSettings,
    StoreChecks,
)
from memvault.contract.scanning import check_stored, current_stored_check
from memvault.contract.versions import CONTRACT_VERSION
from memvault.hooks.markers import hookimpl, hookspec
from memvault.vault import (
    AsyncVault,
    Vault,
    open,  # noqa: A004 - memvault.open mirrors the builtin on purpose
    open_async,
    open_configured,
    open_from_config,
    settings_from_pairs,
)

# ``memvault.errors`` is a public path (memvault 0.1.0's module, not deprecated): it is
# the contract's error module itself, so ``import memvault.errors`` works too.
_sys.modules.setdefault("memvault.errors", errors)

__all__ = [
    "CAPS",
    "CONTRACT_VERSION",
    "AsyncVault",
    "CapExceeded",
    "Capability",
    "CompactionFailed",
    "ContentRejected",
    "DoctorCheck",
    "Embedder",
    "PendingLine",
    "QueryVector",
    "RegisterEmbedder",
    "line_digest",
    "vector_bytes",
    "vectors_from_bytes",
    "DocumentInfo",
    "ForgetRequest",
    "ForgetResult",
    "HealthStatus",
    "IdempotencyConflict",
    "InvalidRequest",
    "LifecycleContext",
    "LifecycleError",
    "ListDocumentsRequest",
    "ListDocumentsResult",
    "MemoryVerbs",
    "MemvaultDeprecationWarning",
    "MemvaultError",
    "MemvaultRemovedIn1Warning",
    "Message",
    "Mode",
    "NotSupported",
    "NotesConflict",
    "Partition",
    "PluginError",
    "ProviderNotFound",
    "Quarantine",
    "QuarantineRecord",
    "ReadRequest",
    "ReadResult",
    "RecallOutcome",
    "RecallRequest",
    "RecallResult",
    "RecallSnippet",
    "RecalledMessage",
    "RegisterProvider",
    "RegisterScanner",
    "ReplayConflict",
    "RetainRequest",
    "RetainResult",
    "ScopeContext",
    "ScratchSettings",
    "SlotOptions",
    "StoreChecks",
    "StoredBody",
    "Tier",
    "Tool",
    "TurnCancelled",
    "TurnFailed",
    "Unauthorized",
    "UpstreamError",
    "UpstreamTimeout",
    "Vault",
    "after_fork_in_child",
    "body_sha256",
    "cap_warning",
    "check_cap",
    "check_stored",
    "current_stored_check",
    "errors",
    "hookimpl",
    "hookspec",
    "label_for",
    "open",
    "open_async",
    "open_configured",
    "open_from_config",
    "parse_label",
    "settings_from_pairs",
    "today_utc",
    "validate_identifier",
]
