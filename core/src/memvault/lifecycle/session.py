"""Layer 6: a conversation's history and the lifecycle phases over it (contract L5-L11).

An agent loop calls its :class:`Session` at its turn boundaries; every phase
runs the slots through one loop (:meth:`Session._run_phase`) that builds each
slot's context, calls the phase's hook on the slot's vault and applies the
phase's failure rule (L10).

May import: :mod:`memvault.contract`, :mod:`memvault.lifecycle.scopes`,
:mod:`memvault.lifecycle.slots`, :mod:`memvault.lifecycle.tools` and :mod:`memvault.vault`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol, TypeVar

from attrs import evolve, field, frozen

from memvault.contract.errors import (
    CompactionFailed,
    InvalidRequest,
    LifecycleError,
    ReplayConflict,
    TurnCancelled,
    TurnFailed,
)
from memvault.contract.forking import after_fork_in_child
from memvault.contract.lifecycle import (
    MAX_RECORD_BYTES,
    MAX_RECORD_ENTRIES,
    PHASE_COMPACTION_COMPLETED,
    PHASE_COMPACTION_REQUESTED,
    PHASE_TOOLS,
    PHASE_TURN_COMPLETED,
    PHASE_TURN_STARTED,
    LifecycleContext,
    Message,
    RecallOutcome,
    ScopeContext,
    Tool,
    validate_recall_result,
)
from memvault.contract.models import validate_identifier
from memvault.lifecycle.scopes import length_prefixed, normalise_scope, operation_id, scope_key
from memvault.lifecycle.slots import LockedScope, Slot
from memvault.lifecycle.tools import ToolSet, bind_slot_tools
from memvault.vault import Vault

__all__ = ["CompactionPlan", "Entry", "Session", "TurnStart"]

log = logging.getLogger("memvault.lifecycle")


class _Slots(Protocol):
    """What a session needs of its :class:`~memvault.lifecycle.runtime.Runtime`."""

    @property
    def slots(self) -> tuple[Slot, ...]: ...

    @property
    def workspace_id(self) -> str: ...

    @property
    def compaction_threshold_tokens(self) -> int: ...


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
        h.update(
            length_prefixed((m.id or "").encode())
            + (b"k" if m.id is not None else b"u")
            + length_prefixed(m.content.encode())
        )
    return h.hexdigest()


def _digest_text(*parts: str) -> str:
    return hashlib.sha256(b"".join(length_prefixed(p.encode("utf-8", "surrogatepass")) for p in parts)).hexdigest()


class Session:
    """One conversation's history and the lifecycle phases over it (L5-L11).

    Thread-safe: each phase holds the session lock. Build with :meth:`Runtime.session`.
    """

    def __init__(self, runtime: _Slots, session_id: str, *, principal: str | None, metadata: Mapping[str, Any]) -> None:
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
        after_fork_in_child(self, Session._forked)

    def _forked(self) -> None:
        # In a forked child (P35): a turn start holds the session lock while recalls run; a fork
        # then would leave it held for ever here. The child continues the history it was given.
        self._lock = threading.RLock()
        self._cancel_lock = threading.Lock()

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
        scope = normalise_scope(scope)
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
            options=slot.options,
            **extra,
        )

    # -- the one per-slot phase loop ----------------------------------------

    def _run_phase(
        self,
        phase: str,
        locks: Mapping[str, LockedScope],
        turn: int | None,
        history: tuple[Message, ...],
        accept: Callable[[LifecycleContext, object], _T],
        failed: Callable[[Slot, Exception], LifecycleError | None],
        **extra: str,
    ) -> list[tuple[Slot, LifecycleContext, _T]]:
        """Call ``phase``'s hook for every slot with a locked scope, in slot order.

        ``accept(ctx, raw)`` checks and converts each hook's result. When either
        raises, ``failed(slot, exc)`` decides: an error to raise at once (the cause
        chained), or ``None`` to skip that slot and go on (L10).
        """
        results: list[tuple[Slot, LifecycleContext, _T]] = []
        for slot in self.runtime.slots:
            locked = locks.get(slot.name)
            if locked is None:
                continue  # L2: a disabled slot takes part in no phase
            ctx = self._context(slot, locked, phase, turn, history, **extra)
            try:
                value = accept(ctx, _PHASE_CALLS[phase](slot.vault, ctx))
            except Exception as exc:
                error = failed(slot, exc)
                if error is None:
                    continue
                raise error from exc
            results.append((slot, ctx, value))
        return results

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

            def failed(slot: Slot, exc: Exception) -> LifecycleError:
                if self._is_cancelled(turn):
                    return TurnCancelled(
                        f"turn {turn} was cancelled; slot {slot.name!r} recall did not complete",
                        slot=slot.name,
                        phase=PHASE_TURN_STARTED,
                    )
                return TurnFailed(
                    f"turn {turn} failed: slot {slot.name!r} {PHASE_TURN_STARTED} recall "
                    f"{'returned an invalid result' if isinstance(exc, InvalidRequest) else 'raised'}: "
                    f"{type(exc).__name__}: {exc}. Nothing was committed; fix the slot's provider and retry",
                    slot=slot.name,
                    phase=PHASE_TURN_STARTED,
                )

            outcomes = self._run_phase(
                PHASE_TURN_STARTED, locks, turn, pre_recall, _recall_outcome, failed, input_text=input_text
            )
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
            self._entries = _project(self._entries)

    # -- tools ---------------------------------------------------------------

    def _tools(self, turn: int | None, locks: Mapping[str, LockedScope]) -> ToolSet:
        def omitted(slot: Slot, exc: Exception) -> None:  # L10: logged and omitted for this turn
            log.warning("slot %r tools omitted for turn %s: %s: %s", slot.name, turn, type(exc).__name__, exc)

        bound = self._run_phase(PHASE_TOOLS, locks, turn, (), _bound_tools, omitted)
        tools = [tool for _, _, slot_tools in bound for tool in slot_tools]
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

            def logged(slot: Slot, exc: Exception) -> None:  # L10: logged, the turn stands
                log.warning(
                    "slot %r turn.completed capture failed (turn %s kept): %s: %s",
                    slot.name,
                    turn,
                    type(exc).__name__,
                    exc,
                )

            self._run_phase(
                PHASE_TURN_COMPLETED,
                self._locks,
                turn,
                history,
                _captured,
                logged,
                input_text=self._turn_input,
                output_text=output_text,
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

                def failed(slot: Slot, exc: Exception) -> LifecycleError:
                    return CompactionFailed(
                        f"slot {slot.name!r} {PHASE_COMPACTION_REQUESTED} capture raised "
                        f"{type(exc).__name__}: {exc}; the history is unchanged, retry the compaction",
                        slot=slot.name,
                        phase=PHASE_COMPACTION_REQUESTED,
                    )

                self._run_phase(PHASE_COMPACTION_REQUESTED, locks, turn, to_summarise, _captured, failed)
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
            kept = [e for e in _project(head) if e.kind == "record"]
            checkpoint = Entry(role="user", content=summary, kind="checkpoint")
            self._entries = [checkpoint, *kept, *tail]
            marker = operation_id(self.session_id, plan.epoch, None, PHASE_COMPACTION_COMPLETED, "")
            self._ops[marker] = _digest_text(summary)
            locks = self._locks if turn is not None and turn == self._locked_turn else self._standalone_locks()
            history = (Message(role=checkpoint.role, content=checkpoint.content),)

            def failed(slot: Slot, exc: Exception) -> LifecycleError:
                return TurnFailed(
                    f"slot {slot.name!r} {PHASE_COMPACTION_COMPLETED} recall failed: "
                    f"{type(exc).__name__}: {exc}; the checkpoint stands, no record was re-injected",
                    slot=slot.name,
                    phase=PHASE_COMPACTION_COMPLETED,
                )

            try:
                outcomes = self._run_phase(PHASE_COMPACTION_COMPLETED, locks, turn, history, _recall_outcome, failed)
            except TurnFailed as failure:
                self._pending = None
                self._epoch = plan.epoch + 1
                if turn is not None:
                    raise
                log.warning("standalone compaction: %s", failure)
                return ()
            self._pending = None
            self._epoch = plan.epoch + 1
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


_T = TypeVar("_T")

#: What each phase calls on a slot's vault.
_PHASE_CALLS: Final[dict[str, Callable[[Vault, LifecycleContext], object]]] = {
    PHASE_TURN_STARTED: Vault.recall_turn_started,
    PHASE_TURN_COMPLETED: Vault.capture_turn_completed,
    PHASE_COMPACTION_REQUESTED: Vault.capture_compaction_requested,
    PHASE_COMPACTION_COMPLETED: Vault.recall_compaction_completed,
    PHASE_TOOLS: Vault.tools,
}


def _recall_outcome(ctx: LifecycleContext, raw: object) -> RecallOutcome | None:
    return validate_recall_result(raw, slot=ctx.slot, phase=ctx.phase)


def _captured(ctx: LifecycleContext, raw: object) -> object:
    return raw


def _bound_tools(ctx: LifecycleContext, raw: object) -> list[Tool]:
    return bind_slot_tools(ctx.slot, ctx.description, raw)
