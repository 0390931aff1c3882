"""Layer 5, the default lifecycle plugin: recall, capture and tools over the provider verbs.

Registered in every vault with ``trylast=True`` implementations, so a provider
that implements a lifecycle hook itself takes precedence.

What it does, per slot kind (``ctx.options.kind``):

* ``memory`` — ``turn.started``: recall with the turn's input text inside the
  slot's partition; each hit becomes a message with the stable id
  ``<label>#<line>`` (so a changed line supersedes its earlier version).
  ``compaction.completed``: the same query over the new checkpoint's text.
  ``turn.completed``: when the slot opted in (``capture=True``), append the
  turn to today's daily document. Tools: ``read``, ``write``, ``search``,
  ``append_daily``.
* ``notes`` — both recalls return the notes as one message (id ``notes``);
  tools ``save`` and ``remove`` (see :mod:`memvault.default_lifecycle.notes`).

The registry loads it by dotted name like every built-in plugin; its
``memvault_vault_plugins`` hook hands every vault a fresh instance.

May import: :mod:`memvault.contract`, :mod:`memvault.hooks` and the other
modules of :mod:`memvault.default_lifecycle`.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Final

from memvault.contract.errors import CapExceeded, IdempotencyConflict
from memvault.contract.lifecycle import LifecycleContext, RecalledMessage, RecallOutcome, Tool
from memvault.contract.models import CAPS, RecallRequest, RetainRequest, Tier
from memvault.default_lifecycle.notes import NotesStore, notes_tools
from memvault.default_lifecycle.tools import daily_line, idempotency_key_for, memory_tools
from memvault.hooks.markers import hookimpl

__all__ = ["DefaultLifecycle"]

log = logging.getLogger("memvault.lifecycle")

#: A captured turn is at most this many bytes in the daily document.
MAX_CAPTURE_BYTES: Final = 2000
#: The compaction.completed recall queries at most this many characters of the checkpoint.
_MAX_QUERY_CHARS: Final = 2000


def _is_notes(ctx: LifecycleContext) -> bool:
    return ctx.options.kind == "notes"


def _notes_store(ctx: LifecycleContext) -> NotesStore:
    return NotesStore(ctx.vault, workspace_id=ctx.workspace_id, agent_id=ctx.agent_id)


def _clip(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "..."


class DefaultLifecycle:
    """Implements the lifecycle hooks on top of ``memvault_recall`` / ``memvault_retain``."""

    def _search(self, ctx: LifecycleContext, query: str) -> RecallOutcome | None:
        if not query.strip():
            return None
        limit = ctx.options.recall_limit
        result = ctx.vault.recall(
            RecallRequest(
                workspace_id=ctx.workspace_id, agent_id=ctx.agent_id, query=query[:_MAX_QUERY_CHARS], limit=limit
            )
        )
        if not result.hits:
            return None
        return RecallOutcome(
            messages=[
                RecalledMessage(id=f"{hit.source}#{hit.line}", content=hit.snippet)
                for hit in result.hits
                if hit.snippet.strip()
            ]
        )

    @hookimpl(trylast=True)
    def memvault_recall_turn_started(self, ctx: LifecycleContext) -> RecallOutcome | None:
        if _is_notes(ctx):
            return _notes_store(ctx).recall()
        return self._search(ctx, ctx.input_text)

    @hookimpl(trylast=True)
    def memvault_recall_compaction_completed(self, ctx: LifecycleContext) -> RecallOutcome | None:
        if _is_notes(ctx):
            return _notes_store(ctx).recall()
        checkpoint = "\n".join(m.content for m in ctx.history)
        return self._search(ctx, checkpoint)

    @hookimpl(trylast=True)
    def memvault_capture_turn_completed(self, ctx: LifecycleContext) -> bool | None:
        if _is_notes(ctx) or not ctx.options.capture:
            return None  # capture into the daily tier is opt-in per slot
        asked = ctx.input_text or next((m.content for m in reversed(ctx.history) if m.role == "user"), "")
        text = f"user: {_clip(asked, 600)} | assistant: {_clip(ctx.output_text, 1200)}"
        line = _clip(daily_line(text).rstrip("\n"), MAX_CAPTURE_BYTES) + "\n"
        # Keyed by the slot and the phase's operation id where the provider keeps keys (P44): the same
        # turn.completed delivered again (a retry after a lost answer, another replica) writes nothing.
        # idempotency_key_for also asks an http-remote client whether its service's provider records keys:
        # a key it cannot honour would make the capture fail with NotSupported.
        key = idempotency_key_for(
            ctx.vault, "turn:" + hashlib.sha256(f"{ctx.slot}\0{ctx.operation_id}".encode()).hexdigest()[:40]
        )
        try:
            ctx.vault.retain(
                RetainRequest(
                    workspace_id=ctx.workspace_id,
                    agent_id=ctx.agent_id,
                    tier=Tier.DAILY,
                    content=line,
                    mode="append",
                    idempotency_key=key,
                )
            )
        except IdempotencyConflict:
            log.debug("slot %r: turn %r was captured already (operation %r)", ctx.slot, ctx.turn, ctx.operation_id)
        except CapExceeded:
            log.warning(
                "slot %r: today's daily document is full (%s bytes); turn not captured", ctx.slot, CAPS[Tier.DAILY]
            )
        return True

    @hookimpl(trylast=True)
    def memvault_capture_compaction_requested(self, ctx: LifecycleContext) -> bool | None:
        return None  # the turns were captured as they completed; nothing more to keep

    @hookimpl(trylast=True)
    def memvault_tools(self, ctx: LifecycleContext) -> list[Tool] | None:
        if _is_notes(ctx):
            return notes_tools(_notes_store(ctx))
        return memory_tools(ctx)


@hookimpl
def memvault_vault_plugins() -> list[object]:
    """Every vault gets the default lifecycle, behind any phase its provider implements."""
    return [DefaultLifecycle()]
