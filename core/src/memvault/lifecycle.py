"""Agent lifecycle types: what the lifecycle hooks receive and return.

The session runtime (slots, scope keys, turn and compaction phases) builds on
these types; see the lifecycle guide in the documentation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from attrs import field, frozen

if TYPE_CHECKING:
    from memvault.vault import Vault

__all__ = ["LifecycleContext", "Message", "RecallOutcome", "RecalledMessage", "Tool"]


@frozen(kw_only=True)
class Message:
    """One history entry as a provider sees it: attribution is stripped (L7)."""

    role: str
    content: str


@frozen(kw_only=True)
class RecalledMessage:
    """One recalled record: non-blank ``content`` and an optional stable ``id`` (L6)."""

    content: str
    id: str | None = None


@frozen(kw_only=True)
class RecallOutcome:
    """What a recall phase returns for one slot (L6)."""

    messages: tuple[RecalledMessage, ...] = field(converter=tuple)


@frozen(kw_only=True)
class Tool:
    """A model-facing tool: a name, a description, a JSON Schema and its handler."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Callable[[Mapping[str, Any]], Any]


@frozen(kw_only=True)
class LifecycleContext:
    """What a lifecycle hook knows about the slot and the moment it is called at.

    ``workspace_id`` and ``agent_id`` are the partition the slot's locked scope
    maps to: every read and write of the phase stays inside it.
    """

    vault: Vault
    slot: str
    description: str
    scope_key: str
    workspace_id: str
    agent_id: str
    session_id: str
    phase: str
    operation_id: str
    turn: int | None = None
    input_text: str = ""
    history: tuple[Message, ...] = ()
    settings: Mapping[str, Any] = field(factory=dict)
