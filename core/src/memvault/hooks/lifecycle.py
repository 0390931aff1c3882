"""Lifecycle hooks, per slot, on a vault's plugin manager, ``firstresult=True``.

The core's default lifecycle plugin implements them over the provider verbs
with ``trylast=True``, so a provider that implements a phase itself overrides
the default. Holds only hook specifications. May import:
:mod:`memvault.contract` and :mod:`memvault.hooks.markers`.

The interface is append-only (contract D4): new hooks and new optional
arguments may be added, nothing is removed or renamed.
"""

from __future__ import annotations

from memvault.contract.lifecycle import LifecycleContext, RecallOutcome, Tool
from memvault.hooks.markers import hookspec


@hookspec(firstresult=True)
def memvault_recall_turn_started(ctx: LifecycleContext) -> RecallOutcome | None:
    """Recall for a slot at the start of a turn (``turn.started``), before the model runs.

    :param ctx: the slot, its locked scope, the turn's input and the pre-recall history.
    :return: messages to put in front of the model, or ``None`` for nothing.
    """


@hookspec(firstresult=True)
def memvault_recall_compaction_completed(ctx: LifecycleContext) -> RecallOutcome | None:
    """Recall for a slot after history was compacted (``compaction.completed``).

    :param ctx: the slot, its scope and the new checkpoint as history.
    :return: messages to re-inject, or ``None``.
    """


@hookspec(firstresult=True)
def memvault_capture_turn_completed(ctx: LifecycleContext) -> bool | None:
    """Capture what a finished turn should leave in memory (``turn.completed``).

    :param ctx: the slot, its scope and the history including the turn's output.
    :return: ``True`` when handled (stops further implementations), else ``None``.
    """


@hookspec(firstresult=True)
def memvault_capture_compaction_requested(ctx: LifecycleContext) -> bool | None:
    """Capture what is about to be compacted away (``compaction.requested``).

    :param ctx: the slot, its scope and the history about to be summarised.
    :return: ``True`` when handled, else ``None``.
    """


@hookspec(firstresult=True)
def memvault_tools(ctx: LifecycleContext) -> list[Tool] | None:
    """Model-facing tools for a slot, bound to its locked scope (contract L12-L13).

    :param ctx: the slot and its locked scope.
    :return: the tools (unprefixed names; the runtime adds ``<slot>__``), or ``None``.
    """
