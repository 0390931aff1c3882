"""Every hook memvault calls. Implementations may accept a subset of the arguments.

Three groups:

* registration hooks, called once on the global plugin manager when plugins load;
* provider verbs, ``firstresult=True``: the vault's provider answers, and
  cross-cutting plugins (the scanner, audit, metrics) wrap them with
  ``@hookimpl(wrapper=True)``;
* lifecycle hooks, ``firstresult=True``: the core's default lifecycle plugin
  implements them over the provider verbs with ``trylast=True``, so a provider
  that implements a phase itself overrides the default.

The interface is append-only (contract D4): new hooks and new optional
arguments may be added, nothing is removed or renamed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memvault.markers import hookspec

if TYPE_CHECKING:
    import click

    from memvault.lifecycle import LifecycleContext, RecallOutcome, Tool
    from memvault.models import (
        ForgetRequest,
        ForgetResult,
        HealthStatus,
        ListDocumentsRequest,
        ListDocumentsResult,
        QuarantineRecord,
        ReadRequest,
        ReadResult,
        RecallRequest,
        RecallResult,
        RetainRequest,
        RetainResult,
    )
    from memvault.plugins import RegisterProvider, RegisterScanner


# -- registration (global plugin manager) -----------------------------------


@hookspec
def memvault_register_providers(register: RegisterProvider) -> None:
    """Register the providers this plugin offers.

    Call ``register(name, factory, capabilities=..., scratch=...)`` once per
    provider. A name another plugin already registered is an error naming both
    plugins; nothing is renamed.

    :param register: the callback that records one provider; see
        :class:`memvault.plugins.RegisterProvider`.
    :return: nothing.
    """


@hookspec
def memvault_register_commands(cli: click.Group) -> None:
    """Add commands to the ``memvault`` command line.

    :param cli: the root click group; call ``cli.add_command(...)``.
    :return: nothing.
    """


@hookspec
def memvault_register_scanners(register: RegisterScanner) -> None:
    """Register content scanners that vaults can use (``scanner = "NAME"`` in config).

    Call ``register(name, factory)``; ``factory()`` returns a plugin object
    whose ``@hookimpl(wrapper=True)`` methods wrap the provider verbs.

    :param register: the callback that records one scanner.
    :return: nothing.
    """


# -- provider verbs (a vault's plugin manager) -------------------------------


@hookspec(firstresult=True)
def memvault_retain(request: RetainRequest) -> RetainResult:
    """Store content in one document (contract P5-P13).

    The request is already validated; ``request.key`` is resolved (today's
    date for an empty daily key). Enforce the cap with
    :func:`memvault.models.check_cap` before writing anything.

    :param request: the validated retain request.
    :return: the document label, the stored body's size and the cap warning.
    """


@hookspec(firstresult=True)
def memvault_recall(request: RecallRequest) -> RecallResult:
    """Search the request's partitions line by line (contract P14-P20).

    :param request: the validated recall request; ``request.limit`` is already
        clamped to 1..20 and :meth:`~memvault.models.RecallRequest.scopes`
        lists the partitions and tiers to search.
    :return: at most ``request.limit`` hits, highest score first.
    """


@hookspec(firstresult=True)
def memvault_read(request: ReadRequest) -> ReadResult:
    """Return one whole document (contract P21); a missing one has an empty body.

    :param request: the validated read request.
    :return: the label and the body.
    """


@hookspec(firstresult=True)
def memvault_forget(request: ForgetRequest) -> ForgetResult:
    """Remove a document by label, or every document of a data subject (P22-P24).

    A provider without the ``cascade_forget`` capability raises
    :class:`~memvault.errors.NotSupported` for ``data_subject_id``.

    A document carries every subject that ever wrote to it (P13): erasing any
    of them removes the whole document, its tags and every quarantine copy of
    a write tagged with the subject. Match subjects exactly. When the bytes
    cannot be scrubbed at once (readers hold a write-ahead log), return
    ``pending=True``, keep a durable record, finish the scrub later, and let a
    repeat of the same forget finish it (P24).

    :param request: the validated forget request; exactly one of ``id`` and
        ``data_subject_id`` is set.
    :return: how many documents were removed, and whether their scrub is pending.
    """


@hookspec(firstresult=True)
def memvault_health() -> HealthStatus:
    """Probe the storage behind the provider (contract P25-P27).

    Report problems as ``ok=False`` with a distinct message; do not raise. The
    vault runs this under a hard deadline. Leave nothing behind. A provider
    that records pending erasures (P24) counts them in ``pending_erasures``.

    :return: the provider's health.
    """


@hookspec(firstresult=True)
def memvault_list_documents(request: ListDocumentsRequest) -> ListDocumentsResult:
    """Enumerate stored documents without their bodies (contract P32; optional).

    Providers with the ``list_documents`` capability implement it; the vault
    raises :class:`~memvault.errors.NotSupported` for the others. ``export``
    and ``memvault inspect`` are built on it. Report every document a verb
    could read, including quarantined ones, and nothing else (no lock, probe or
    temporary file).

    :param request: the validated filters; an empty ``workspace_id`` means
        every workspace. :meth:`~memvault.models.ListDocumentsRequest.includes`
        states which documents match.
    :return: one :class:`~memvault.models.DocumentInfo` per matching document
        (the result sorts them by workspace, crew, agent and label).
    """


@hookspec(firstresult=True)
def memvault_quarantine_keep(record: QuarantineRecord) -> bool | None:
    """Keep a copy of content the scanner rejected, for the operator (contract P30).

    Providers with the ``quarantine`` capability implement this (and the two
    hooks below). Keep the copy out of every recall/read path and readable only
    by the owner. The scanner fails closed: if no implementation returns
    ``True``, or one raises, the write still fails.

    :param record: the rejected body with the rule that fired.
    :return: ``True`` once the copy is durably kept.
    """


@hookspec(firstresult=True)
def memvault_quarantine_list(workspace_id: str) -> list[QuarantineRecord] | None:
    """The quarantine copies kept for one workspace, oldest first.

    :param workspace_id: the workspace to list.
    :return: the records (``content`` included), or ``None`` without quarantine support.
    """


@hookspec(firstresult=True)
def memvault_quarantine_get(workspace_id: str, sha256: str) -> QuarantineRecord | None:
    """One quarantine copy by its body's sha256.

    :param workspace_id: the workspace it was kept for.
    :param sha256: the hex digest the scanner reported in ``ContentRejected``.
    :return: the record, or ``None`` when there is none.
    """


# -- lifecycle (per slot) ----------------------------------------------------


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
