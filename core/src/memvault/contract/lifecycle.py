"""Layer 1, the lifecycle's contract types: what crosses the lifecycle hooks (contract L1-L14).

The values a lifecycle hook receives and returns (:class:`LifecycleContext`,
:class:`RecallOutcome`, :class:`Tool`), what a scope resolver sees
(:class:`ScopeContext`), the phase names and the record limits. The runtime
that builds them lives in :mod:`memvault.lifecycle`.

May import: :mod:`memvault.contract.errors` and :mod:`memvault.contract.models`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, Protocol

from attrs import field, frozen

from memvault.contract.errors import InvalidRequest
from memvault.contract.models import (
    MAX_RECALL_LIMIT,
    ForgetRequest,
    ForgetResult,
    ReadRequest,
    ReadResult,
    RecallRequest,
    RecallResult,
    RetainRequest,
    RetainResult,
)

__all__ = [
    "MAX_RECORD_BYTES",
    "MAX_RECORD_ENTRIES",
    "MAX_RECORD_ID_BYTES",
    "PHASE_COMPACTION_COMPLETED",
    "PHASE_COMPACTION_REQUESTED",
    "PHASE_TOOLS",
    "PHASE_TURN_COMPLETED",
    "PHASE_TURN_STARTED",
    "LifecycleContext",
    "MemoryVerbs",
    "Message",
    "RecallOutcome",
    "RecalledMessage",
    "ScopeContext",
    "SlotOptions",
    "Tool",
    "validate_recall_result",
]

MAX_RECORD_ID_BYTES: Final = 1024
#: Records are canonicalised (superseded versions dropped) past either bound (L9).
MAX_RECORD_ENTRIES: Final = 512
MAX_RECORD_BYTES: Final = 256 * 1024

PHASE_TURN_STARTED: Final = "turn.started"
PHASE_TURN_COMPLETED: Final = "turn.completed"
PHASE_COMPACTION_REQUESTED: Final = "compaction.requested"
PHASE_COMPACTION_COMPLETED: Final = "compaction.completed"
PHASE_TOOLS: Final = "tools"


class MemoryVerbs(Protocol):
    """What a lifecycle hook may call on its slot's vault: the storage verbs (a :class:`memvault.Vault`)."""

    @property
    def name(self) -> str: ...

    def retain(self, request: RetainRequest) -> RetainResult: ...

    def recall(self, request: RecallRequest) -> RecallResult: ...

    def read(self, request: ReadRequest) -> ReadResult: ...

    def forget(self, request: ForgetRequest) -> ForgetResult: ...


def _kind(instance: object, attribute: Any, value: Any) -> None:
    if value not in ("memory", "notes"):
        raise InvalidRequest(f"kind {value!r} is not 'memory' or 'notes'", field="kind")


def _recall_limit(instance: object, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RECALL_LIMIT:
        raise InvalidRequest(
            f"recall_limit must be an integer from 1 to {MAX_RECALL_LIMIT}, got {value!r}", field="recall_limit"
        )


@frozen(kw_only=True)
class SlotOptions:
    """A slot's options as its lifecycle hooks see them (``ctx.options``).

    :param kind: ``memory`` (recall/capture/memory tools) or ``notes`` (numbered notes, L14).
    :param capture: whether the default ``turn.completed`` capture writes today's daily document.
    :param recall_limit: hits the default turn-start recall asks for (1..20).
    :param settings: anything else the slot was configured with, for third-party hooks.
    """

    kind: Literal["memory", "notes"] = field(default="memory", validator=_kind)
    capture: bool = False
    recall_limit: int = field(default=5, validator=_recall_limit)
    settings: Mapping[str, Any] = field(factory=dict)


@frozen(kw_only=True)
class Message:
    """One history entry as a provider or the model sees it: attribution is stripped (L7)."""

    role: str
    content: str


def _record_content(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(
            "a recalled message needs non-blank 'content' (L6): return text, or no message at all",
            field="content",
        )


def _record_id(instance: object, attribute: Any, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str) or value == "":
        raise InvalidRequest(
            f"a recalled message's 'id' must be a non-empty string when set (L6), got {value!r}", field="id"
        )
    if len(value.encode("utf-8")) > MAX_RECORD_ID_BYTES:
        raise InvalidRequest(
            f"a recalled message's 'id' is over {MAX_RECORD_ID_BYTES} UTF-8 bytes (L6): use a shorter stable id",
            field="id",
        )


@frozen(kw_only=True)
class RecalledMessage:
    """One recalled record: non-blank ``content`` and an optional stable ``id`` (L6)."""

    content: str = field(validator=_record_content)
    id: str | None = field(default=None, validator=_record_id)


def _messages_tuple(value: Iterable[RecalledMessage]) -> tuple[RecalledMessage, ...]:
    return tuple(value)


def _unique_ids(instance: object, attribute: Any, value: tuple[RecalledMessage, ...]) -> None:
    seen: set[str] = set()
    for message in value:
        if not isinstance(message, RecalledMessage):
            raise InvalidRequest(
                f"recall messages must be RecalledMessage or {{content, id}} mappings (L6), "
                f"got {type(message).__name__}",
                field="messages",
            )
        if message.id is not None:
            if message.id in seen:
                raise InvalidRequest(
                    f"duplicate id {message.id[:80]!r} in one recall result (L6): give each record its own id",
                    field="id",
                )
            seen.add(message.id)


@frozen(kw_only=True)
class RecallOutcome:
    """What a recall phase returns for one slot (L6): messages with unique ids."""

    messages: tuple[RecalledMessage, ...] = field(converter=_messages_tuple, validator=_unique_ids)


@frozen(kw_only=True)
class Tool:
    """A model-facing tool: a name, a description, a JSON Schema and its handler.

    The handler receives the validated arguments; it is bound to the slot's
    locked scope, so no argument can reach another partition (L12).
    """

    name: str
    description: str
    input_schema: Mapping[str, Any]
    handler: Callable[[Mapping[str, Any]], Any] = field(eq=False, repr=False)


@frozen(kw_only=True)
class LifecycleContext:
    """What a lifecycle hook knows about the slot and the moment it is called at.

    ``workspace_id`` and ``agent_id`` are the partition the slot's locked scope
    maps to (``agent_id`` is the scope key): every read and write of the phase
    stays inside it. ``history`` never carries slot attribution (L7).
    """

    vault: MemoryVerbs
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
    output_text: str = ""
    history: tuple[Message, ...] = ()
    options: SlotOptions = field(factory=lambda: SlotOptions())


def validate_recall_result(value: object, *, slot: str = "", phase: str = "") -> RecallOutcome | None:
    """Check a recall hook's result against L6 and return it as a :class:`RecallOutcome`.

    Accepted shapes: ``None``, a :class:`RecallOutcome`, or a mapping
    ``{"messages": [{"content": ..., "id": ...}, ...]}``.

    :raises InvalidRequest: naming the rule the result breaks.
    """
    where = f"slot {slot!r} {phase} recall" if slot else "recall"
    if value is None or isinstance(value, RecallOutcome):
        return value
    if not isinstance(value, Mapping):
        raise InvalidRequest(
            f"{where} returned {type(value).__name__}: a recall result is None or {{'messages': [...]}} (L6)",
            field="messages",
        )
    extra = sorted(str(k) for k in value if k != "messages")
    if extra:
        raise InvalidRequest(
            f"{where} result has unknown keys {extra} (L6): a recall result has only 'messages'", field=extra[0]
        )
    raw = value.get("messages")
    if not isinstance(raw, (list, tuple)):
        raise InvalidRequest(f"{where} result needs 'messages' as a list (L6)", field="messages")
    messages: list[RecalledMessage] = []
    for item in raw:
        if isinstance(item, RecalledMessage):
            messages.append(item)
            continue
        if not isinstance(item, Mapping):
            raise InvalidRequest(
                f"{where} message is {type(item).__name__}: a message is {{'content': ..., 'id': ...}} (L6)",
                field="messages",
            )
        unknown = sorted(str(k) for k in item if k not in ("content", "id"))
        if unknown:
            raise InvalidRequest(
                f"{where} message has unknown keys {unknown} (L6): a message has only 'content' and 'id'",
                field=unknown[0],
            )
        messages.append(RecalledMessage(content=item.get("content"), id=item.get("id")))  # type: ignore[arg-type]
    return RecallOutcome(messages=messages)


@frozen(kw_only=True)
class ScopeContext:
    """What a scope resolver (and a callable namespace) sees: who is talking, in which session."""

    session_id: str
    principal: str | None
    turn: int | None
    slot: str
    metadata: Mapping[str, Any] = field(factory=dict)
