"""Provider verbs: the hooks a vault's plugin manager calls, ``firstresult=True``.

The vault's provider answers; cross-cutting plugins (the scanner, audit,
metrics) wrap them with ``@hookimpl(wrapper=True)``. Holds only hook
specifications. May import: :mod:`memvault.contract` and :mod:`memvault.hooks.markers`.

The interface is append-only (contract D4): new hooks and new optional
arguments may be added, nothing is removed or renamed.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from memvault.contract.embedding import PendingLine
from memvault.contract.errors import MemvaultError
from memvault.contract.models import (
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
from memvault.contract.retention import SweepRequest, SweepResult
from memvault.hooks.markers import hookspec


@hookspec(firstresult=True)
def memvault_retain(request: RetainRequest) -> RetainResult:
    """Store content in one document (contract P5-P13).

    The request is already validated; ``request.key`` is resolved (today's
    date for an empty daily key). Enforce the cap with
    :func:`memvault.contract.models.check_cap` before writing anything.

    :param request: the validated retain request.
    :return: the document label, the stored body's size and the cap warning.
    """


@hookspec(firstresult=True)
def memvault_write_group() -> AbstractContextManager[None] | None:
    """A write group: the retains this thread makes inside it commit together (contract P34; optional).

    :meth:`memvault.Vault.retain_many` enters the returned context manager, runs
    each retain through the usual hook chain (so every wrapper, the scanner
    among them, sees each one) on the same thread, and exits it. Inside the
    group each retain (and any quarantine copy the scanner keeps for one) joins
    one transaction instead of committing alone: a retain that raises leaves
    nothing of its own behind and the others go on; on a clean exit commit
    everything at once, or raise a memvault error when the commit fails (then
    nothing of the group is stored). On an exit with an exception roll back.
    Retains are the only verb called inside a group.

    A provider without this hook loses nothing: each retain then commits alone.

    :return: the group, entered once per call.
    """


@hookspec(firstresult=True)
def memvault_retain_many(requests: list[RetainRequest]) -> list[RetainResult | MemvaultError] | None:
    """Retain a list at once, one outcome per request, in order (contract P34; optional).

    For a provider that can send a whole list in one round trip (the
    ``http-remote`` client). :meth:`memvault.Vault.retain_many` calls it only
    when no other plugin implements or wraps ``memvault_retain`` on that
    vault (a scanner, an audit plugin): they must see every retain, so with
    one present the vault runs the requests one by one instead. The outcomes
    follow ``retain_many``'s rules: each request's :class:`RetainResult` or
    the memvault error ``retain`` would have raised for it, in order, a later
    request seeing the earlier ones, every success durable on return.

    :param requests: validated requests, at most 64.
    :return: one outcome per request.
    """


@hookspec(firstresult=True)
def memvault_recall(request: RecallRequest) -> RecallResult:
    """Search the request's partitions line by line (contract P14-P20).

    :param request: the validated recall request; ``request.limit`` is already
        clamped to 1..20 and :meth:`~memvault.contract.models.RecallRequest.scopes`
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
        every workspace. :meth:`~memvault.contract.models.ListDocumentsRequest.includes`
        states which documents match.
    :return: one :class:`~memvault.contract.models.DocumentInfo` per matching document
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


@hookspec(firstresult=True)
def memvault_quarantine_delete(workspace_id: str, sha256: str) -> int | None:
    """Delete the quarantine copies of one body, once an operator has reviewed them (optional).

    Operators review a copy (``memvault quarantine show``, the service's console)
    and delete it when it holds nothing worth keeping, or personal data that no
    erasure by subject reaches (a rejected write that named no subject). Delete
    the copy as an erasure would: no later list or get returns it, and its text
    is not left in the storage files where the provider can help it.

    :param workspace_id: the workspace the copies were kept for.
    :param sha256: the hex digest of the rejected body.
    :return: how many copies were deleted (0 when there were none), or ``None``
        when the provider cannot delete copies.
    """


# -- recall by meaning (capability ``vectors``, contract P36-P40; optional) ---------------------


@hookspec(firstresult=True)
def memvault_vectors_pending(model_id: str, limit: int) -> list[PendingLine] | None:
    """Up to ``limit`` indexed lines that have no vector of ``model_id`` yet (P37).

    Durable by construction: a line is pending while its storage holds no vector of
    this model for its current text, so a crash or restart loses no work. A line with
    a vector of another model is pending too (P38). Lines of every partition, in any
    order that eventually reaches each of them; an empty list: nothing waits.

    :param model_id: the vault's embedder's :attr:`memvault.Embedder.model_id`.
    :param limit: at most this many lines (1-64).
    :return: the lines and the keys to store their vectors under.
    """


@hookspec(firstresult=True)
def memvault_vectors_store(model_id: str, vectors: list[tuple[str, bytes]]) -> int | None:
    """Store vectors for lines :func:`memvault_vectors_pending` named (P37).

    Each item is ``(PendingLine.key, memvault.vector_bytes(vector))``. A key whose line
    changed or was removed since is skipped, never attached to other text; storing a
    vector of ``model_id`` for a line replaces any vector of another model it had.
    In one transaction where the provider has them.

    :param model_id: the model the vectors are of.
    :param vectors: ``(key, vector bytes)`` pairs.
    :return: how many vectors were stored.
    """


@hookspec(firstresult=True)
def memvault_vectors_backlog(model_id: str) -> int | None:
    """How many indexed lines have no vector of ``model_id`` (P37): the embedding backlog.

    :param model_id: the vault's embedder's model.
    :return: the count (health reports it as ``HealthStatus.embedding_backlog``).
    """


# -- memory over time (capability ``expiry``, contract P41-P45; optional) -----------------------


@hookspec(firstresult=True)
def memvault_sweep_expired(request: SweepRequest) -> SweepResult | None:
    """Remove what has expired: documents, quarantine copies, idempotency keys (P43; optional).

    Remove the documents whose effective expiry (``purge_at``) is at or before
    ``request.now``, and those whose last accepted write is at or before their
    (workspace, tier) cutoff in ``request.retention.cutoffs(request.now)`` (a
    policy shortened since they were written); at most ``request.limit`` of them,
    the earliest expired first. Remove them as an erasure does (P24, P40): body,
    index rows, vectors, data-subject tags and tier statistics, with no text of a
    removed line left in the storage files where the provider can help it. Also
    remove quarantine copies that expired at ``request.now`` and idempotency keys
    recorded before ``request.keys_before`` (when set). In short transactions or
    batches: a recall during a sweep keeps working. With ``request.dry_run``
    remove nothing and report what would go. Read the time from ``request.now``
    only, never from the database or the system clock.

    :param request: the time, the policy, the keys' horizon, whether to dry-run and the batch size.
    :return: the documents removed (or that would be), the counts of quarantine copies and keys
        removed, and ``more=True`` when expired documents remain beyond ``limit``; ``None`` when the
        provider stores no expiries.
    """
