"""The agent lifecycle: slots, scopes, scope keys, turn and compaction phases (contract L1-L11).

An agent loop owns a :class:`Runtime` (its slots) and one :class:`Session` per
conversation, and calls the session at its turn boundaries::

    runtime = Runtime([Slot(name="profile", description="What we know about the user.",
                            vault=vault, scope=by_principal)], workspace_id="w1")
    session = runtime.session("s1", principal="alice")
    start = session.turn_started(1, "Which units do I prefer?")  # recall, all-or-nothing
    reply = model(session.messages(), tools=start.tools.to_openai())
    session.turn_completed(1, reply)                               # capture

Every slot's scope resolves to a *scope key* (``memscope1_`` + base64url
SHA-256 of a length-prefixed canonical encoding). The key is the slot's
partition: it is the ``agent_id`` of every request the slot's phases and tools
make, in the slot's workspace, so slots, namespaces and scopes never share
documents.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Union

from attrs import evolve, field, frozen

from memvault.errors import InvalidRequest, MemvaultError
from memvault.models import MAX_RECALL_LIMIT, validate_identifier

if TYPE_CHECKING:
    from memvault.tools import ToolSet
    from memvault.vault import Vault

__all__ = [
    "CompactionFailed",
    "CompactionPlan",
    "Entry",
    "LifecycleContext",
    "LifecycleError",
    "LockedScope",
    "Message",
    "RecallOutcome",
    "RecalledMessage",
    "ReplayConflict",
    "Runtime",
    "ScopeContext",
    "Session",
    "Slot",
    "Tool",
    "TurnCancelled",
    "TurnFailed",
    "TurnStart",
    "by_principal",
    "by_session",
    "by_value",
    "canonical_encoding",
    "operation_id",
    "scope_key",
    "validate_recall_result",
]

log = logging.getLogger("memvault.lifecycle")

SCOPE_KEY_VERSION: Final = "memscope1"
OPERATION_ID_VERSION: Final = "memop1"
MAX_NAMESPACE_BYTES: Final = 1024
MAX_SCOPE_COMPONENTS: Final = 16
MAX_COMPONENT_BYTES: Final = 1024
MAX_ENCODING_BYTES: Final = 4096
MAX_RECORD_ID_BYTES: Final = 1024
#: Records are canonicalised (superseded versions dropped) past either bound (L9).
MAX_RECORD_ENTRIES: Final = 512
MAX_RECORD_BYTES: Final = 256 * 1024

PHASE_TURN_STARTED: Final = "turn.started"
PHASE_TURN_COMPLETED: Final = "turn.completed"
PHASE_COMPACTION_REQUESTED: Final = "compaction.requested"
PHASE_COMPACTION_COMPLETED: Final = "compaction.completed"
PHASE_TOOLS: Final = "tools"

_SLOT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_MAX_SLOT_NAME: Final = 64
Visibility = Literal["scope", "session"]

#: A scope: one string, or a tuple of 1-16 strings. ``None`` disables the slot.
Scope = Union[str, tuple[str, ...]]  # noqa: UP007 - a runtime alias on Python 3.10


# -- errors ------------------------------------------------------------------


class LifecycleError(MemvaultError):
    """A lifecycle phase failed; ``slot`` and ``phase`` say where, the cause is chained."""

    def __init__(self, message: str, *, slot: str = "", phase: str = "") -> None:
        super().__init__(message)
        self.slot = slot
        self.phase = phase


class TurnFailed(LifecycleError):
    """The turn failed before (or while) the model could use memory; nothing was committed (L5, L10)."""


class TurnCancelled(TurnFailed):
    """The turn was cancelled; nothing was committed (L10)."""


class CompactionFailed(LifecycleError):
    """A ``compaction.requested`` capture raised: the history is unchanged (L10)."""


class ReplayConflict(LifecycleError):
    """A phase was replayed with the same operation id but a different result (L8)."""


# -- types crossing the lifecycle hooks --------------------------------------


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
    output_text: str = ""
    history: tuple[Message, ...] = ()
    settings: Mapping[str, Any] = field(factory=dict)


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


# -- scopes and scope keys ---------------------------------------------------


@frozen(kw_only=True)
class ScopeContext:
    """What a scope resolver (and a callable namespace) sees: who is talking, in which session."""

    session_id: str
    principal: str | None
    turn: int | None
    slot: str
    metadata: Mapping[str, Any] = field(factory=dict)


ScopeResolver = Callable[[ScopeContext], Any]
NamespaceSpec = Union[str, Callable[[ScopeContext], Any], None]  # noqa: UP007 - a runtime alias on Python 3.10


def by_principal(ctx: ScopeContext) -> str | None:
    """The caller's principal as the scope; ``None`` (slot disabled) for anonymous callers (L2)."""
    return ctx.principal if ctx.principal else None


def by_session(ctx: ScopeContext) -> str:
    """The session id as the scope: memory that belongs to one conversation."""
    return ctx.session_id


def by_value(value: Scope) -> ScopeResolver:
    """A fixed scope for every caller (a shared team memory, say)."""
    _normalise_scope(value)  # fail at configuration time, not at the first turn

    def resolve(ctx: ScopeContext) -> Scope:
        return value

    resolve.__name__ = f"by_value({value!r})"
    return resolve


def _lp(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _component(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise InvalidRequest(
            f"{what} must be a string, got {type(value).__name__} (L3): scopes are strings or tuples of strings",
            field="scope",
        )
    if not value.strip():
        raise InvalidRequest(f"{what} is blank (L3): every scope component must be non-blank", field="scope")
    data = value.encode("utf-8", "surrogatepass")
    if len(data) > MAX_COMPONENT_BYTES:
        raise InvalidRequest(
            f"{what} is {len(data)} UTF-8 bytes, over the limit of {MAX_COMPONENT_BYTES} (L3)", field="scope"
        )
    return data


def _normalise_scope(scope: object) -> Scope:
    if isinstance(scope, str):
        _component(scope, "scope")
        return scope
    if isinstance(scope, (tuple, list)):
        if not 1 <= len(scope) <= MAX_SCOPE_COMPONENTS:
            raise InvalidRequest(
                f"a scope tuple has {len(scope)} components (L3): use 1 to {MAX_SCOPE_COMPONENTS}", field="scope"
            )
        for index, part in enumerate(scope):
            _component(part, f"scope component {index}")
        return tuple(scope)
    raise InvalidRequest(
        f"scope must be a string or a tuple of strings, got {type(scope).__name__} (L3)", field="scope"
    )


def _namespace_bytes(namespace: object) -> bytes:
    if not isinstance(namespace, str):
        raise InvalidRequest(f"namespace must be a string, got {type(namespace).__name__} (L3)", field="namespace")
    if not namespace.strip():
        raise InvalidRequest("namespace is blank (L3): set a non-blank namespace, or none", field="namespace")
    data = namespace.encode("utf-8", "surrogatepass")
    if len(data) > MAX_NAMESPACE_BYTES:
        raise InvalidRequest(
            f"namespace is {len(data)} UTF-8 bytes, over the limit of {MAX_NAMESPACE_BYTES} (L3)", field="namespace"
        )
    return data


def canonical_encoding(namespace: str | None, scope: Scope) -> bytes:
    """The length-prefixed canonical encoding of a namespace and a scope (L3-L4).

    ``namespace``: ``b"-"`` when absent, else ``b"n"`` + 4-byte big-endian length + UTF-8.
    ``scope``: a string is ``b"s"`` + length-prefixed UTF-8; a tuple is ``b"t"`` +
    2-byte count + each component length-prefixed, so ``"a"`` and ``("a",)`` differ.

    :raises InvalidRequest: naming the L3 rule the namespace or scope breaks.
    """
    ns = b"-" if namespace is None else b"n" + _lp(_namespace_bytes(namespace))
    scope = _normalise_scope(scope)
    if isinstance(scope, str):
        body = b"s" + _lp(_component(scope, "scope"))
    else:
        body = b"t" + len(scope).to_bytes(2, "big") + b"".join(_lp(_component(p, "scope component")) for p in scope)
    encoding = ns + body
    if len(encoding) > MAX_ENCODING_BYTES:
        raise InvalidRequest(
            f"namespace and scope encode to {len(encoding)} bytes, over the combined limit of "
            f"{MAX_ENCODING_BYTES} (L3): use fewer or shorter components",
            field="scope",
        )
    return encoding


def _digest(version: str, payload: bytes) -> str:
    raw = hashlib.sha256(version.encode("ascii") + b"\x00" + payload).digest()
    return f"{version}_" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def scope_key(
    slot: str,
    namespace: str | None,
    scope: Scope,
    *,
    visibility: Visibility = "scope",
    session_id: str = "",
) -> str:
    """The versioned, deterministic scope key of a slot's scope (L4).

    ``memscope1_`` + base64url (no padding) SHA-256 over the slot name, the
    visibility (and the session id under ``session`` visibility) and
    :func:`canonical_encoding`. It is 53 characters and a valid identifier,
    so it is used directly as the partition's ``agent_id``.
    """
    _check_slot_name(slot)
    head = _lp(slot.encode("utf-8"))
    if visibility == "session":
        head += b"S" + _lp(session_id.encode("utf-8"))
    elif visibility == "scope":
        head += b"A"
    else:
        raise InvalidRequest(f"visibility {visibility!r} is not 'scope' or 'session' (L1)", field="visibility")
    return _digest(SCOPE_KEY_VERSION, head + canonical_encoding(namespace, scope))


def operation_id(session_id: str, sequence: int, turn: int | None, phase: str, slot: str) -> str:
    """The versioned, stable id of one phase of one slot (L8): ``memop1_`` + base64url SHA-256.

    ``sequence`` is the session's compaction epoch (0 until the first
    compaction completes); ``turn`` is ``None`` for standalone compaction.
    """
    turn_part = "standalone" if turn is None else f"turn:{turn}"
    payload = b"".join(_lp(p.encode("utf-8")) for p in (session_id, str(sequence), turn_part, phase, slot))
    return _digest(OPERATION_ID_VERSION, payload)


def _check_slot_name(name: object) -> str:
    if not isinstance(name, str) or not _SLOT_NAME.fullmatch(name) or len(name) > _MAX_SLOT_NAME:
        raise InvalidRequest(
            f"slot name {name!r} is invalid (L1): use a letter then letters, digits, '_' or '-' "
            f"(at most {_MAX_SLOT_NAME} characters)",
            field="name",
        )
    return name


# -- slots -------------------------------------------------------------------


def _unwrap_vault(value: object) -> Vault:
    from memvault.vault import AsyncVault, Vault

    if isinstance(value, AsyncVault):
        return value.vault
    if isinstance(value, Vault):
        return value
    raise InvalidRequest(
        f"a slot's vault must be a memvault.Vault or AsyncVault, got {type(value).__name__} (L1)", field="vault"
    )


def _slot_name(instance: object, attribute: Any, value: Any) -> None:
    _check_slot_name(value)


def _visibility(instance: object, attribute: Any, value: Any) -> None:
    if value not in ("scope", "session"):
        raise InvalidRequest(f"visibility {value!r} is not 'scope' or 'session' (L1)", field="visibility")


def _resolver(instance: object, attribute: Any, value: Any) -> None:
    if not callable(value):
        raise InvalidRequest(
            "scope must be a resolver: by_principal, by_session, by_value(...) or a callable (L1)", field="scope"
        )


def _namespace_spec(instance: object, attribute: Any, value: Any) -> None:
    if value is None or callable(value):
        return
    _namespace_bytes(value)


def _kind(instance: object, attribute: Any, value: Any) -> None:
    if value not in ("memory", "notes"):
        raise InvalidRequest(f"kind {value!r} is not 'memory' or 'notes'", field="kind")


def _recall_limit(instance: object, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RECALL_LIMIT:
        raise InvalidRequest(
            f"recall_limit must be an integer from 1 to {MAX_RECALL_LIMIT}, got {value!r}", field="recall_limit"
        )


def _workspace(instance: object, attribute: Any, value: Any) -> None:
    validate_identifier(value, "workspace_id", required=False)


@frozen(kw_only=True)
class Slot:
    """A named memory bound to a provider and a scope resolver (L1).

    :param name: ``[A-Za-z][A-Za-z0-9_-]*``; tools are exposed as ``<name>__<tool>``.
    :param description: what this memory is for; prepended to every tool description.
    :param vault: the provider (a :class:`~memvault.Vault`, or an ``AsyncVault``).
    :param scope: the resolver: :func:`by_principal`, :func:`by_session`,
        :func:`by_value` or any callable ``(ScopeContext) -> scope | None``.
    :param namespace: optional; a string or a callable resolved after the scope.
    :param visibility: ``scope`` (shared by every session with the same scope)
        or ``session`` (also keyed by the session id).
    :param workspace_id: the workspace of the slot's partition (default: the runtime's).
    :param capture: opt in to the default ``turn.completed`` capture into today's daily document.
    :param kind: ``memory`` (recall/capture/memory tools) or ``notes`` (numbered notes, L14).
    :param recall_limit: hits the default turn-start recall asks for (1..20).
    :param settings: extra settings passed to the lifecycle hooks in ``ctx.settings``.
    """

    name: str = field(validator=_slot_name)
    description: str
    vault: Vault = field(converter=_unwrap_vault)
    scope: ScopeResolver = field(validator=_resolver)
    namespace: NamespaceSpec = field(default=None, validator=_namespace_spec)
    visibility: Visibility = field(default="scope", validator=_visibility)
    workspace_id: str = field(default="", validator=_workspace)
    capture: bool = False
    kind: Literal["memory", "notes"] = field(default="memory", validator=_kind)
    recall_limit: int = field(default=5, validator=_recall_limit)
    settings: Mapping[str, Any] = field(factory=dict)

    def hook_settings(self) -> dict[str, Any]:
        merged = dict(self.settings)
        merged.setdefault("kind", self.kind)
        merged.setdefault("capture", self.capture)
        merged.setdefault("recall_limit", self.recall_limit)
        return merged


@frozen(kw_only=True)
class LockedScope:
    """A slot's scope as resolved and locked for one turn (L5): its key is its partition."""

    slot: str
    scope: Scope
    namespace: str | None
    scope_key: str
    workspace_id: str
    turn: int | None


# -- history -----------------------------------------------------------------


@frozen(kw_only=True)
class Entry:
    """One entry of a session's history, with its attribution.

    ``kind`` is ``message`` (the loop's own user/assistant messages),
    ``record`` (recalled by ``slot``, keyed by ``record_id`` if any) or
    ``checkpoint`` (a compaction summary).
    """

    role: str
    content: str
    kind: Literal["message", "record", "checkpoint"] = "message"
    slot: str | None = None
    record_id: str | None = None


@frozen(kw_only=True)
class TurnStart:
    """What :meth:`Session.turn_started` hands the agent loop."""

    turn: int
    scopes: Mapping[str, LockedScope]
    records: tuple[Entry, ...]
    tools: ToolSet
    replayed: bool = False


@frozen(kw_only=True)
class CompactionPlan:
    """What to summarise: the history before the checkpoint, recalled records left out (L9)."""

    messages: tuple[Message, ...]
    epoch: int
    turn: int | None
    cut: int = field(repr=False)


def _digest_outcome(outcome: RecallOutcome | None) -> str:
    if outcome is None:
        return "none"
    h = hashlib.sha256()
    for m in outcome.messages:
        h.update(_lp((m.id or "").encode()) + (b"k" if m.id is not None else b"u") + _lp(m.content.encode()))
    return h.hexdigest()


def _digest_text(*parts: str) -> str:
    return hashlib.sha256(b"".join(_lp(p.encode("utf-8", "surrogatepass")) for p in parts)).hexdigest()


class Runtime:
    """The slots of an agent, and the sessions that use them.

    :param slots: the memory slots; names must be unique.
    :param workspace_id: the default workspace of every slot's partition.
    :param compaction_threshold_tokens: history size (estimated at 4
        characters a token) past which :meth:`Session.needs_compaction` is true.
    """

    def __init__(
        self,
        slots: Iterable[Slot],
        *,
        workspace_id: str = "default",
        compaction_threshold_tokens: int = 8000,
    ) -> None:
        self.slots: tuple[Slot, ...] = tuple(slots)
        names = [s.name for s in self.slots]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InvalidRequest(f"slot names must be unique (L1): {dupes} appear more than once", field="name")
        self.workspace_id = validate_identifier(workspace_id, "workspace_id")
        if isinstance(compaction_threshold_tokens, bool) or not isinstance(compaction_threshold_tokens, int):
            raise InvalidRequest("compaction_threshold_tokens must be an integer", field="compaction_threshold_tokens")
        if compaction_threshold_tokens < 1:
            raise InvalidRequest("compaction_threshold_tokens must be at least 1", field="compaction_threshold_tokens")
        self.compaction_threshold_tokens = compaction_threshold_tokens

    def session(self, session_id: str, *, principal: str | None = None, metadata: Mapping[str, Any] = {}) -> Session:
        """A new conversation. ``principal`` is who is talking (``None``: anonymous)."""
        return Session(self, session_id, principal=principal, metadata=metadata)


class Session:
    """One conversation's history and the lifecycle phases over it (L5-L11).

    Thread-safe: each phase holds the session lock. Build with :meth:`Runtime.session`.
    """

    def __init__(
        self, runtime: Runtime, session_id: str, *, principal: str | None, metadata: Mapping[str, Any]
    ) -> None:
        self.runtime = runtime
        self.session_id = validate_identifier(session_id, "session_id")
        if principal is not None and not isinstance(principal, str):
            raise InvalidRequest("principal must be a string or None", field="principal")
        self.principal = principal
        self.metadata = dict(metadata)
        self._lock = threading.RLock()
        self._entries: list[Entry] = []
        self._locks: dict[str, LockedScope] = {}
        self._locked_turn: int | None = None
        self._ops: dict[str, str] = {}
        self._epoch = 0
        self._pending: CompactionPlan | None = None
        self._cancelled: set[int] = set()
        # Not the session lock: a turn start holds that while recalls run, and
        # cancelling must work from another thread meanwhile.
        self._cancel_lock = threading.Lock()
        self._last_start: TurnStart | None = None
        self._turn_input = ""

    # -- views ---------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """How many compactions completed in this session (the operation-id sequence)."""
        return self._epoch

    def entries(self) -> list[Entry]:
        """The raw history with attribution, superseded records included."""
        with self._lock:
            return list(self._entries)

    def projected(self) -> list[Entry]:
        """The history as the model sees it: only the latest record per (slot, id) (L7)."""
        with self._lock:
            return _project(self._entries)

    def messages(self) -> list[Message]:
        """What to send the model: :meth:`projected` with attribution stripped (L7)."""
        return [Message(role=e.role, content=e.content) for e in self.projected()]

    @property
    def locked_scopes(self) -> dict[str, LockedScope]:
        """The scopes locked at the last turn start, by slot name."""
        with self._lock:
            return dict(self._locks)

    def add_message(self, role: str, content: str) -> None:
        """Append one of the loop's own messages (a tool result, say) to the history."""
        with self._lock:
            self._entries.append(Entry(role=role, content=content))

    def needs_compaction(self) -> bool:
        """True when the projected history is past the runtime's token threshold."""
        chars = sum(len(e.content) for e in self.projected())
        return chars // 4 > self.runtime.compaction_threshold_tokens

    def cancel(self, turn: int) -> None:
        """Mark ``turn`` cancelled: its recall commits nothing and fails as :class:`TurnCancelled`.

        Safe to call from another thread while :meth:`turn_started` runs.
        """
        with self._cancel_lock:
            self._cancelled.add(turn)

    def _is_cancelled(self, turn: int) -> bool:
        with self._cancel_lock:
            return turn in self._cancelled

    # -- scopes --------------------------------------------------------------

    def _resolve(self, slot: Slot, turn: int | None) -> LockedScope | None:
        ctx = ScopeContext(
            session_id=self.session_id, principal=self.principal, turn=turn, slot=slot.name, metadata=self.metadata
        )
        scope = slot.scope(ctx)
        if scope is None:
            return None  # L2: disabled, namespace not even resolved
        scope = _normalise_scope(scope)
        namespace = slot.namespace(ctx) if callable(slot.namespace) else slot.namespace
        key = scope_key(slot.name, namespace, scope, visibility=slot.visibility, session_id=self.session_id)
        return LockedScope(
            slot=slot.name,
            scope=scope,
            namespace=namespace,
            scope_key=key,
            workspace_id=slot.workspace_id or self.runtime.workspace_id,
            turn=turn,
        )

    def _context(
        self, slot: Slot, locked: LockedScope, phase: str, turn: int | None, history: tuple[Message, ...], **extra: str
    ) -> LifecycleContext:
        sequence = (
            self._pending.epoch if (self._pending is not None and phase.startswith("compaction")) else self._epoch
        )
        return LifecycleContext(
            vault=slot.vault,
            slot=slot.name,
            description=slot.description,
            scope_key=locked.scope_key,
            workspace_id=locked.workspace_id,
            agent_id=locked.scope_key,
            session_id=self.session_id,
            phase=phase,
            operation_id=operation_id(self.session_id, sequence, turn, phase, slot.name),
            turn=turn,
            history=history,
            settings=slot.hook_settings(),
            **extra,
        )

    # -- turn.started --------------------------------------------------------

    def turn_started(self, turn: int, input_text: str = "") -> TurnStart:
        """Resolve and lock every slot's scope, recall for each, commit all-or-nothing (L2, L5-L8, L10).

        On success the recalled records and then ``input_text`` (as a user
        message, when non-empty) enter the history.

        :raises InvalidRequest: a scope or namespace breaks L3.
        :raises TurnFailed: a recall raised or returned an invalid result; nothing was committed.
        :raises TurnCancelled: the same, when the turn was cancelled.
        :raises ReplayConflict: the turn was replayed and a recall returned something else.
        """
        if isinstance(turn, bool) or not isinstance(turn, int) or turn < 0:
            raise InvalidRequest(f"turn must be a non-negative integer, got {turn!r}", field="turn")
        with self._lock:
            locks: dict[str, LockedScope] = {}
            for slot in self.runtime.slots:  # L5: every scope before any recall
                locked = self._resolve(slot, turn)
                if locked is not None:
                    locks[slot.name] = locked
            pre_recall = tuple(Message(role=e.role, content=e.content) for e in _project(self._entries))
            outcomes: list[tuple[Slot, LifecycleContext, RecallOutcome | None]] = []
            for slot in self.runtime.slots:
                if slot.name not in locks:
                    continue
                ctx = self._context(slot, locks[slot.name], PHASE_TURN_STARTED, turn, pre_recall, input_text=input_text)
                try:
                    raw = slot.vault.plugin_manager.hook.memvault_recall_turn_started(ctx=ctx)
                    outcome = validate_recall_result(raw, slot=slot.name, phase=PHASE_TURN_STARTED)
                except Exception as exc:
                    if self._is_cancelled(turn):
                        raise TurnCancelled(
                            f"turn {turn} was cancelled; slot {slot.name!r} recall did not complete",
                            slot=slot.name,
                            phase=PHASE_TURN_STARTED,
                        ) from exc
                    raise TurnFailed(
                        f"turn {turn} failed: slot {slot.name!r} {PHASE_TURN_STARTED} recall "
                        f"{'returned an invalid result' if isinstance(exc, InvalidRequest) else 'raised'}: "
                        f"{type(exc).__name__}: {exc}. Nothing was committed; fix the slot's provider and retry",
                        slot=slot.name,
                        phase=PHASE_TURN_STARTED,
                    ) from exc
                outcomes.append((slot, ctx, outcome))
            if self._is_cancelled(turn):
                raise TurnCancelled(
                    f"turn {turn} was cancelled before its recall was committed", phase=PHASE_TURN_STARTED
                )
            replayed = self._check_replay([(ctx.operation_id, _digest_outcome(o), s.name) for s, ctx, o in outcomes])
            if replayed:  # L8: the same result again is a no-op
                if self._last_start is not None and self._last_start.turn == turn:
                    return evolve(self._last_start, replayed=True)
                return TurnStart(
                    turn=turn, scopes=dict(locks), records=(), tools=self._tools(turn, locks), replayed=True
                )
            # Commit: nothing above has touched the session.
            self._locks = locks
            self._locked_turn = turn
            self._turn_input = input_text
            added: list[Entry] = []
            for slot, ctx, outcome in outcomes:
                self._ops[ctx.operation_id] = _digest_outcome(outcome)
                if outcome is not None:
                    added.extend(self._add_records(slot.name, outcome))
            if input_text:
                self._entries.append(Entry(role="user", content=input_text))
            self._canonicalise_if_large()
            start = TurnStart(turn=turn, scopes=dict(locks), records=tuple(added), tools=self._tools(turn, locks))
            self._last_start = start
            return start

    def _check_replay(self, ops: Sequence[tuple[str, str, str]]) -> bool:
        """True when every op was seen with the same result; a different result raises (L8)."""
        seen = [op for op in ops if op[0] in self._ops]
        for op_id, digest, slot in seen:
            if self._ops[op_id] != digest:
                raise ReplayConflict(
                    f"operation {op_id} (slot {slot!r}) was replayed with a different result (L8): "
                    "a replayed phase must return what it returned the first time",
                    slot=slot,
                )
        return bool(ops) and len(seen) == len(ops)

    def _add_records(self, slot: str, outcome: RecallOutcome) -> list[Entry]:
        latest = {(e.slot, e.record_id): e.content for e in self._entries if e.kind == "record" and e.record_id}
        added: list[Entry] = []
        for message in outcome.messages:
            if message.id is not None and latest.get((slot, message.id)) == message.content:
                continue  # L7: same id, same content
            entry = Entry(role="user", content=message.content, kind="record", slot=slot, record_id=message.id)
            self._entries.append(entry)
            added.append(entry)
        return added

    def _canonicalise_if_large(self) -> None:
        records = [e for e in self._entries if e.kind == "record"]
        size = sum(len(e.content.encode("utf-8", "surrogatepass")) for e in records)
        if len(records) > MAX_RECORD_ENTRIES or size > MAX_RECORD_BYTES:
            self._entries = _drop_superseded(self._entries)

    # -- tools ---------------------------------------------------------------

    def _tools(self, turn: int | None, locks: Mapping[str, LockedScope]) -> ToolSet:
        from memvault.tools import ToolSet, bind_slot_tools

        tools: list[Tool] = []
        for slot in self.runtime.slots:
            if slot.name not in locks:
                continue  # L2: a disabled slot has no tools
            ctx = self._context(slot, locks[slot.name], PHASE_TOOLS, turn, ())
            try:
                raw = slot.vault.plugin_manager.hook.memvault_tools(ctx=ctx)
                tools.extend(bind_slot_tools(slot.name, slot.description, raw))
            except Exception as exc:  # noqa: BLE001 - L10: logged and omitted for this turn
                log.warning("slot %r tools omitted for turn %s: %s: %s", slot.name, turn, type(exc).__name__, exc)
        return ToolSet(tools)

    def tools(self) -> ToolSet:
        """The tools bound to the currently locked scopes (empty before the first turn)."""
        with self._lock:
            return self._tools(self._locked_turn, self._locks)

    # -- turn.completed ------------------------------------------------------

    def turn_completed(self, turn: int, output_text: str = "") -> None:
        """Append the model's answer and run every slot's capture (L8, L10).

        A capture that raises is logged; the completed turn stands.

        :raises InvalidRequest: ``turn`` is not the turn that was started last.
        :raises ReplayConflict: the turn was already completed with another output.
        """
        with self._lock:
            if turn != self._locked_turn:
                raise InvalidRequest(
                    f"turn_completed({turn}) but the started turn is {self._locked_turn}: "
                    "call turn_started for this turn first",
                    field="turn",
                )
            digest = _digest_text(output_text)
            ops = [
                (operation_id(self.session_id, self._epoch, turn, PHASE_TURN_COMPLETED, name), digest, name)
                for name in self._locks
            ]
            marker = (operation_id(self.session_id, self._epoch, turn, PHASE_TURN_COMPLETED, ""), digest, "")
            if self._check_replay([*ops, marker]):
                return
            for op_id, d, _ in (*ops, marker):
                self._ops[op_id] = d
            if output_text:
                self._entries.append(Entry(role="assistant", content=output_text))
            history = tuple(Message(role=e.role, content=e.content) for e in _project(self._entries))
            for slot in self.runtime.slots:
                if slot.name not in self._locks:
                    continue
                ctx = self._context(
                    slot,
                    self._locks[slot.name],
                    PHASE_TURN_COMPLETED,
                    turn,
                    history,
                    input_text=self._turn_input,
                    output_text=output_text,
                )
                try:
                    slot.vault.plugin_manager.hook.memvault_capture_turn_completed(ctx=ctx)
                except Exception as exc:  # noqa: BLE001 - L10: logged, the turn stands
                    log.warning(
                        "slot %r turn.completed capture failed (turn %s kept): %s: %s",
                        slot.name,
                        turn,
                        type(exc).__name__,
                        exc,
                    )

    # -- compaction ----------------------------------------------------------

    def compaction_requested(self, turn: int | None = None) -> CompactionPlan:
        """Run every slot's capture over the history about to be summarised (L9, L10).

        ``turn`` set: automatic compaction inside that turn; ``None``: standalone.

        :return: the messages to summarise, recalled records left out.
        :raises CompactionFailed: a capture raised; the history is unchanged.
        """
        with self._lock:
            cut = len(self._entries)
            to_summarise = tuple(Message(role=e.role, content=e.content) for e in self._entries if e.kind != "record")
            plan = CompactionPlan(messages=to_summarise, epoch=self._epoch, turn=turn, cut=cut)
            locks = self._locks if turn is not None and turn == self._locked_turn else self._standalone_locks()
            self._pending = plan
            try:
                for slot in self.runtime.slots:
                    if slot.name not in locks:
                        continue
                    ctx = self._context(slot, locks[slot.name], PHASE_COMPACTION_REQUESTED, turn, to_summarise)
                    try:
                        slot.vault.plugin_manager.hook.memvault_capture_compaction_requested(ctx=ctx)
                    except Exception as exc:
                        raise CompactionFailed(
                            f"slot {slot.name!r} {PHASE_COMPACTION_REQUESTED} capture raised "
                            f"{type(exc).__name__}: {exc}; the history is unchanged, retry the compaction",
                            slot=slot.name,
                            phase=PHASE_COMPACTION_REQUESTED,
                        ) from exc
            except BaseException:
                self._pending = None
                raise
            return plan

    def _standalone_locks(self) -> dict[str, LockedScope]:
        if self._locks:
            return dict(self._locks)
        locks: dict[str, LockedScope] = {}
        for slot in self.runtime.slots:
            locked = self._resolve(slot, None)
            if locked is not None:
                locks[slot.name] = locked
        return locks

    def compaction_completed(self, summary: str) -> tuple[Entry, ...]:
        """Replace the summarised history by a checkpoint, keep the records, recall again (L9, L10).

        The new history is the checkpoint, the latest record per id and every
        unkeyed record, then whatever was added after :meth:`compaction_requested`.
        Then each slot's ``compaction.completed`` recall runs against it and is
        committed all-or-nothing.

        :return: the records the recall added.
        :raises InvalidRequest: no compaction was requested, or ``summary`` is blank.
        :raises TurnFailed: a recall failed during an automatic (in-turn) compaction;
            a standalone compaction only logs it.
        """
        if not isinstance(summary, str) or not summary.strip():
            raise InvalidRequest("summary must be non-blank text: pass the model's summary", field="summary")
        with self._lock:
            plan = self._pending
            if plan is None:
                op = operation_id(self.session_id, self._epoch - 1, None, PHASE_COMPACTION_COMPLETED, "")
                if self._epoch > 0 and self._check_replay([(op, _digest_text(summary), "")]):
                    return ()
                raise InvalidRequest(
                    "compaction_completed without compaction_requested: request the compaction first",
                    field="summary",
                )
            turn = plan.turn
            head = self._entries[: plan.cut]
            tail = self._entries[plan.cut :]
            kept = [e for e in _drop_superseded(head) if e.kind == "record"]
            checkpoint = Entry(role="user", content=summary, kind="checkpoint")
            self._entries = [checkpoint, *kept, *tail]
            marker = operation_id(self.session_id, plan.epoch, None, PHASE_COMPACTION_COMPLETED, "")
            self._ops[marker] = _digest_text(summary)
            locks = self._locks if turn is not None and turn == self._locked_turn else self._standalone_locks()
            history = (Message(role=checkpoint.role, content=checkpoint.content),)
            outcomes: list[tuple[Slot, LifecycleContext, RecallOutcome | None]] = []
            failure: LifecycleError | None = None
            for slot in self.runtime.slots:
                if slot.name not in locks:
                    continue
                ctx = self._context(slot, locks[slot.name], PHASE_COMPACTION_COMPLETED, turn, history)
                try:
                    raw = slot.vault.plugin_manager.hook.memvault_recall_compaction_completed(ctx=ctx)
                    outcomes.append(
                        (slot, ctx, validate_recall_result(raw, slot=slot.name, phase=PHASE_COMPACTION_COMPLETED))
                    )
                except Exception as exc:  # noqa: BLE001 - L10: raised or logged below
                    failure = TurnFailed(
                        f"slot {slot.name!r} {PHASE_COMPACTION_COMPLETED} recall failed: "
                        f"{type(exc).__name__}: {exc}; the checkpoint stands, no record was re-injected",
                        slot=slot.name,
                        phase=PHASE_COMPACTION_COMPLETED,
                    )
                    failure.__cause__ = exc
                    break
            self._pending = None
            self._epoch = plan.epoch + 1
            if failure is not None:
                if turn is not None:
                    raise failure
                log.warning("standalone compaction: %s", failure)
                return ()
            added: list[Entry] = []
            for slot, ctx, outcome in outcomes:
                self._ops[ctx.operation_id] = _digest_outcome(outcome)
                if outcome is not None:
                    added.extend(self._add_records(slot.name, outcome))
            return tuple(added)

    def compact(self, summarise: Callable[[Sequence[Message]], str], turn: int | None = None) -> tuple[Entry, ...]:
        """:meth:`compaction_requested`, ``summarise(messages)``, then :meth:`compaction_completed`."""
        plan = self.compaction_requested(turn)
        try:
            summary = summarise(plan.messages)
        except BaseException:
            with self._lock:
                self._pending = None
            raise
        return self.compaction_completed(summary)

    # -- clear ---------------------------------------------------------------

    def clear(self) -> None:
        """Forget this session's history, records, locks and replay bookkeeping (L11).

        The providers' stores are untouched.
        """
        with self._lock:
            self._entries = []
            self._locks = {}
            self._locked_turn = None
            self._ops = {}
            self._epoch = 0
            self._pending = None
            with self._cancel_lock:
                self._cancelled = set()
            self._last_start = None
            self._turn_input = ""

    # -- asyncio -------------------------------------------------------------

    async def aturn_started(self, turn: int, input_text: str = "") -> TurnStart:
        """Awaitable :meth:`turn_started` (runs in a worker thread)."""
        return await asyncio.to_thread(self.turn_started, turn, input_text)

    async def aturn_completed(self, turn: int, output_text: str = "") -> None:
        """Awaitable :meth:`turn_completed`."""
        await asyncio.to_thread(self.turn_completed, turn, output_text)

    async def acompaction_requested(self, turn: int | None = None) -> CompactionPlan:
        """Awaitable :meth:`compaction_requested`."""
        return await asyncio.to_thread(self.compaction_requested, turn)

    async def acompaction_completed(self, summary: str) -> tuple[Entry, ...]:
        """Awaitable :meth:`compaction_completed`."""
        return await asyncio.to_thread(self.compaction_completed, summary)


def _project(entries: Sequence[Entry]) -> list[Entry]:
    last: dict[tuple[str | None, str], int] = {}
    for index, e in enumerate(entries):
        if e.kind == "record" and e.record_id is not None:
            last[(e.slot, e.record_id)] = index
    return [
        e
        for index, e in enumerate(entries)
        if not (e.kind == "record" and e.record_id is not None and last[(e.slot, e.record_id)] != index)
    ]


def _drop_superseded(entries: Sequence[Entry]) -> list[Entry]:
    return _project(entries)
