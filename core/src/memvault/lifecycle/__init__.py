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
