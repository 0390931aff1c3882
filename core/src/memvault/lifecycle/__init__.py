"""Layer 6, the lifecycle runtime: slots, scopes, sessions and the tools of a turn (contract L1-L14).

An agent loop owns a :class:`Runtime` (its slots) and one :class:`Session` per
conversation, and calls the session at its turn boundaries::

    runtime = Runtime([Slot(name="profile", description="What we know about the user.",
                            vault=vault, scope=by_principal)], workspace_id="w1")
    session = runtime.session("s1", principal="alice")
    start = session.turn_started(1, "Which units do I prefer?")  # recall, all-or-nothing
    reply = model(session.messages(), tools=start.tools.to_openai())
    session.turn_completed(1, reply)                               # capture

* :mod:`memvault.lifecycle.scopes`: scope keys and operation ids;
* :mod:`memvault.lifecycle.slots`: :class:`Slot` and :class:`LockedScope`;
* :mod:`memvault.lifecycle.tools`: :class:`ToolSet`, dispatch and exporters;
* :mod:`memvault.lifecycle.session`: :class:`Session` and its phases;
* :mod:`memvault.lifecycle.runtime`: :class:`Runtime`.

The types that cross the lifecycle hooks are in :mod:`memvault.contract.lifecycle`
(and on :mod:`memvault` itself); the default recall, capture and tools are the
built-in plugin :mod:`memvault.default_lifecycle`.

May import: every layer below it (this package's own modules import in the order above).
"""

from __future__ import annotations

from memvault.contract.deprecation import forward
from memvault.lifecycle.runtime import Runtime
from memvault.lifecycle.scopes import by_principal, by_session, by_value, canonical_encoding, operation_id, scope_key
from memvault.lifecycle.session import CompactionPlan, Entry, Session, TurnStart
from memvault.lifecycle.slots import LockedScope, Slot
from memvault.lifecycle.tools import ToolResult, ToolSet

__all__ = [
    "CompactionPlan",
    "Entry",
    "LockedScope",
    "Runtime",
    "Session",
    "Slot",
    "ToolResult",
    "ToolSet",
    "TurnStart",
    "by_principal",
    "by_session",
    "by_value",
    "canonical_encoding",
    "operation_id",
    "scope_key",
]

# memvault 0.1.0's ``memvault.lifecycle`` was one module that also held these names;
# each old path still gives the same object, with one warning (removed in 1.0.0).
__getattr__, __dir__ = forward(
    __name__,
    {
        **dict.fromkeys(
            ("CompactionFailed", "LifecycleError", "ReplayConflict", "TurnCancelled", "TurnFailed"),
            "memvault.contract.errors",
        ),
        **dict.fromkeys(
            (
                "LifecycleContext",
                "MAX_RECORD_BYTES",
                "MAX_RECORD_ENTRIES",
                "MAX_RECORD_ID_BYTES",
                "Message",
                "PHASE_COMPACTION_COMPLETED",
                "PHASE_COMPACTION_REQUESTED",
                "PHASE_TOOLS",
                "PHASE_TURN_COMPLETED",
                "PHASE_TURN_STARTED",
                "RecallOutcome",
                "RecalledMessage",
                "ScopeContext",
                "Tool",
                "validate_recall_result",
            ),
            "memvault.contract.lifecycle",
        ),
        **dict.fromkeys(
            (
                "MAX_COMPONENT_BYTES",
                "MAX_ENCODING_BYTES",
                "MAX_NAMESPACE_BYTES",
                "MAX_SCOPE_COMPONENTS",
                "NamespaceSpec",
                "OPERATION_ID_VERSION",
                "SCOPE_KEY_VERSION",
                "Scope",
                "ScopeResolver",
                "Visibility",
            ),
            "memvault.lifecycle.scopes",
        ),
    },
    whole=False,
)
