"""The ``memory`` provider: complete, thread-safe, in-process, not durable.

It keeps the whole provider contract except surviving the process (no
``durable``/``multi_process`` capability) and is what unit tests and users'
tests reach for, like LangGraph's ``InMemoryStore``.

Layer 5. May import: :mod:`memvault.contract`, :mod:`memvault.hooks` and :mod:`memvault.search`.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from attrs import frozen

from memvault import search as text
from memvault.contract import clock
from memvault.contract.embedding import PendingLine, line_digest, vectors_from_bytes
from memvault.contract.errors import IdempotencyConflict, InvalidRequest
from memvault.contract.forking import after_fork_in_child
from memvault.contract.locks import HeldLock
from memvault.contract.models import (
    Capability,
    DocumentInfo,
    ForgetRequest,
    ForgetResult,
    HealthStatus,
    ListDocumentsRequest,
    ListDocumentsResult,
    Partition,
    QuarantineRecord,
    ReadRequest,
    ReadResult,
    RecallRequest,
    RecallResult,
    RetainRequest,
    RetainResult,
    Tier,
    body_sha256,
    effective_expiry,
)
from memvault.contract.registration import RegisterProvider
from memvault.contract.retention import SweepRequest, SweepResult
from memvault.contract.scanning import check_stored, nothing_written
from memvault.contract.versions import CONTRACT_VERSION
from memvault.hooks.markers import hookimpl

__all__ = ["MemoryProvider"]


def _owner(partition: Partition) -> tuple[str, str]:
    """``(agent_id, crew_id)`` as a quarantine record names the owner of a document of ``partition``."""
    return (partition.owner_id, "") if partition.kind == "agent" else ("", partition.owner_id)


@frozen(kw_only=True)
class _Document:
    tier: Tier
    body: str
    size: int
    #: Every data subject that wrote to this document since it was created (P13).
    data_subjects: frozenset[str]
    index: text.IndexedDocument
    digest: str
    updated_at: _dt.datetime = attrs.field(factory=clock.now)
    #: The explicit expiry the writes gave the document (P41) and its effective one (P43).
    expires_at: _dt.datetime | None = None
    purge_at: _dt.datetime | None = None

    def live(self, now: _dt.datetime) -> bool:
        """Whether the document has not expired at ``now`` (an expired one is absent for every verb, P42)."""
        return self.purge_at is None or self.purge_at > now


@frozen(kw_only=True)
class _Key:
    """An idempotency key's record (P44): the write's fingerprint, its result, when it was recorded."""

    fingerprint: str
    result: RetainResult
    recorded_at: _dt.datetime


class MemoryProvider:
    """Documents in a dict, guarded by one lock; an append indexes only what it adds."""

    capabilities = frozenset(
        {
            Capability.CASCADE_FORGET,
            Capability.QUARANTINE,
            Capability.LIST_DOCUMENTS,
            Capability.CHECKS_STORED,
            Capability.VECTORS,
            Capability.EXPIRY,
            Capability.IDEMPOTENT_WRITES,
        }
    )

    #: A call that has held the store's lock this long is stuck; one that holds it for less is busy, and a busy
    #: store is healthy (P25). Health waits 100 ms for the lock (P26 gives it 200): a call holds it for
    #: microseconds, but on a loaded machine a thread the scheduler put aside holds it longer, and health,
    #: which called that a stuck call, failed the parity test of health under load now and then.
    stuck_after: float = 5.0

    def __init__(self) -> None:
        self._lock = HeldLock()
        self._overdue = 0  # the last count of documents past their expiry, for a health probe of a busy store
        self._partitions: dict[Partition, dict[str, _Document]] = {}
        # Vectors per document, by line number: (line digest, model id, vector bytes) (P37). Derived
        # data: dropped with their document, and a line's vector only counts while its text is the same.
        self._vectors: dict[tuple[Partition, str], dict[int, tuple[str, str, bytes]]] = {}
        # Quarantine copies per workspace, by sha256, in the order they were kept (P30).
        self._quarantine: dict[str, dict[str, QuarantineRecord]] = {}
        # Idempotency keys per (workspace, key), recorded under the lock of the write they name (P44).
        self._keys: dict[tuple[str, str], _Key] = {}
        after_fork_in_child(self, type(self)._forked)

    def _forked(self) -> None:
        # In a forked child (P35): the child's copy of the documents, under a lock no lost thread holds.
        self._lock = HeldLock()

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        label = ref.label
        with self._lock:
            now = clock.now()
            key = (request.workspace_id, request.idempotency_key)
            if request.idempotency_key:
                recorded = self._keys.get(key)
                if recorded is not None:
                    if recorded.fingerprint != request.fingerprint():
                        raise IdempotencyConflict(key=request.idempotency_key, workspace_id=request.workspace_id)
                    nothing_written()  # tells the scanner's check there is no body to scan (P29)
                    return recorded.result  # a repeat: the first result, nothing written (P44)
            docs = self._partitions.setdefault(ref.partition, {})
            old = docs.get(label)
            if old is not None and not old.live(now):
                # Expired (P42): gone for every verb, so a write starts a new document. Its quarantine
                # copies go with it, as a sweep would remove them.
                del docs[label]
                self._vectors.pop((ref.partition, label), None)
                copies = self._quarantine.get(request.workspace_id, {})
                for digest in [d for d, r in copies.items() if (*_owner(ref.partition), label) == _address(r)]:
                    del copies[digest]
                old = None
            explicit = _explicit_expiry(request, old)
            # The scanner's check of the body this append extends (P29): it may reject, before anything changes.
            check_stored(old.body if old else "", old.digest if old else "")
            final = request.applied_to(old.body if old else "", old.data_subjects if old else ())
            vectors = self._vectors.get((ref.partition, label))
            new_index = (
                text.index_appended(old.index, old.body, final.body) if old else text.index_document(label, final.body)
            )
            if vectors:
                # The vectors of lines this write changed (same number, other text) or removed go; those of
                # lines it kept word for word stay, as the database providers keep those lines' rows (P37).
                first_changed = (
                    text.first_changed_line(old.body, old.index.body_lines)
                    if old is not None and request.mode == "append"
                    else 1
                )
                for number in [n for n in vectors if n >= first_changed]:
                    kept = _line_text(new_index, number)
                    if kept is None or line_digest(kept) != vectors[number][0]:
                        del vectors[number]
            docs[label] = _Document(
                tier=request.tier,
                body=final.body,
                size=final.bytes,
                data_subjects=final.subjects,
                index=new_index,
                digest=body_sha256(final.body),
                updated_at=now,
                expires_at=explicit,
                purge_at=effective_expiry(explicit, now, request.retention),
            )
            result = RetainResult(id=label, bytes=final.bytes, warning=final.warning)
            if request.idempotency_key:
                self._keys[key] = _Key(fingerprint=request.fingerprint(), result=result, recorded_at=now)
        return result

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        query = text.Query.parse(request.query)
        vector = request.vector
        with self._lock:
            now = clock.now()
            found = [
                (partition, label, doc)
                for partition, tiers in request.scopes()
                for label, doc in self._partitions.get(partition, {}).items()
                if doc.tier in tiers and doc.live(now)
            ]
            # The vectors of the searched partitions only (P38), of the query's model, for current text.
            stored = (
                [(label, doc, self._vectors.get((partition, label), {})) for partition, label, doc in found]
                if vector is not None
                else []
            )
        docs = [doc for _, _, doc in found]
        # Each hit carries its document's digest, so the scanner needs no read-back.
        digests = {doc.index.source: doc.digest for doc in docs}
        if vector is None:
            hits = text.search(query, [doc.index for doc in docs], request.limit)
            return RecallResult(hits=text.with_digests(hits, digests))
        lexical = text.with_digests(text.search(query, [doc.index for doc in docs], text.FUSION_DEPTH), digests)
        refs: list[text.LineRef] = []
        blobs: list[bytes] = []
        lines: dict[text.LineRef, str] = {}
        for label, doc, vectors in stored:
            for number, (digest, model_id, blob) in vectors.items():
                line_text = _line_text(doc.index, number)
                if model_id == vector.model_id and line_text is not None and line_digest(line_text) == digest:
                    refs.append((label, number))
                    blobs.append(blob)
                    lines[(label, number)] = line_text
        similar = text.similarities(vector, refs, vectors_from_bytes(blobs, vector.dimensions), lexical)

        def texts(wanted: Sequence[text.LineRef]) -> dict[text.LineRef, tuple[str, str]]:
            return {ref: (lines[ref], digests[ref[0]]) for ref in wanted}

        return RecallResult(hits=text.fuse(query, lexical, similar, texts, request.limit))

    # -- vectors (P37) ---------------------------------------------------------

    @hookimpl
    def memvault_vectors_pending(self, model_id: str, limit: int) -> list[PendingLine]:
        # Every document is looked at (line digests are cached): what is pending is what the store
        # holds, however it was written.
        out: list[PendingLine] = []
        with self._lock:
            now = clock.now()
            documents = [
                (p, label, doc) for p, docs in self._partitions.items() for label, doc in docs.items() if doc.live(now)
            ]
            for partition, label, doc in sorted(documents, key=_document_order):
                missing = _unembedded_lines(doc, self._vectors.get((partition, label), {}), model_id)
                for number, line_text, digest in missing[: limit - len(out)]:
                    key = json.dumps(
                        [partition.workspace_id, partition.kind, partition.owner_id, label, number, digest]
                    )
                    out.append(PendingLine(key=key, text=line_text))
                if len(out) >= limit:
                    break
        return out

    @hookimpl
    def memvault_vectors_store(self, model_id: str, vectors: list[tuple[str, bytes]]) -> int:
        stored = 0
        with self._lock:
            for key, blob in vectors:
                workspace_id, kind, owner_id, label, number, digest = json.loads(key)
                partition = Partition(workspace_id=workspace_id, kind=kind, owner_id=owner_id)
                doc = self._partitions.get(partition, {}).get(label)
                line_text = None if doc is None else _line_text(doc.index, number)
                if line_text is None or line_digest(line_text) != digest:
                    continue  # the line changed or went since it was handed out: never attach to other text
                self._vectors.setdefault((partition, label), {})[number] = (digest, model_id, bytes(blob))
                stored += 1
        return stored

    @hookimpl
    def memvault_vectors_backlog(self, model_id: str) -> int:
        with self._lock:
            now = clock.now()
            return sum(
                len(_unembedded_lines(doc, self._vectors.get((partition, label), {}), model_id))
                for partition, docs in self._partitions.items()
                for label, doc in docs.items()
                if doc.live(now)
            )

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        ref = request.ref
        with self._lock:
            doc = self._partitions.get(ref.partition, {}).get(ref.label)
            live = doc is not None and doc.live(clock.now())
        return ReadResult(id=ref.label, content=doc.body if doc is not None and live else "")

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        with self._lock:
            now = clock.now()
            if request.id:
                ref = request.ref
                docs = self._partitions.get(ref.partition, {})
                self._vectors.pop((ref.partition, ref.label), None)
                gone = docs.pop(ref.label, None)
                # An expired document is removed too, but was already absent (P42): removed=0.
                return ForgetResult(removed=1 if gone is not None and gone.live(now) else 0)
            erased: set[tuple[str, str, str]] = set()
            removed = 0
            for partition, docs in self._partitions.items():
                if partition.workspace_id != request.workspace_id:
                    continue
                for label in [lb for lb, d in docs.items() if request.data_subject_id in d.data_subjects]:
                    removed += docs.pop(label).live(now)
                    self._vectors.pop((partition, label), None)
                    erased.add((*_owner(partition), label))
            # Quarantine copies are derived data too (P24): those of the subject's rejected writes, and
            # those of rejected appends to an erased document (a copy is the final body: it holds its text).
            copies = self._quarantine.get(request.workspace_id, {})
            for digest in [
                d
                for d, r in copies.items()
                if r.data_subject_id == request.data_subject_id or (r.agent_id, r.crew_id, r.label) in erased
            ]:
                del copies[digest]
            return ForgetResult(removed=removed)

    @hookimpl
    def memvault_list_documents(self, request: ListDocumentsRequest) -> ListDocumentsResult:
        with self._lock:
            now = clock.now()
            found = [
                _info(partition, label, doc)
                for partition, docs in self._partitions.items()
                for label, doc in docs.items()
                if doc.live(now)
                and request.includes(
                    workspace_id=partition.workspace_id,
                    agent_id=partition.owner_id if partition.kind == "agent" else "",
                    crew_id=partition.owner_id if partition.kind == "crew" else "",
                    tier=doc.tier,
                )
            ]
        return ListDocumentsResult(documents=found)

    @hookimpl
    def memvault_quarantine_keep(self, record: QuarantineRecord) -> bool:
        with self._lock:
            self._quarantine.setdefault(record.workspace_id, {}).setdefault(record.sha256, record)
        return True

    @hookimpl
    def memvault_quarantine_list(self, workspace_id: str) -> list[QuarantineRecord]:
        with self._lock:
            now = clock.now()
            return [r for r in self._quarantine.get(workspace_id, {}).values() if _copy_live(r, now)]

    @hookimpl
    def memvault_quarantine_get(self, workspace_id: str, sha256: str) -> QuarantineRecord | None:
        with self._lock:
            record = self._quarantine.get(workspace_id, {}).get(sha256)
            return record if record is not None and _copy_live(record, clock.now()) else None

    @hookimpl
    def memvault_quarantine_delete(self, workspace_id: str, sha256: str) -> int:
        with self._lock:
            return 1 if self._quarantine.get(workspace_id, {}).pop(sha256, None) is not None else 0

    @hookimpl
    def memvault_sweep_expired(self, request: SweepRequest) -> SweepResult:
        """Remove expired documents (with their index and vectors), copies and keys (P43), under the lock."""
        now = request.now
        with self._lock:
            due: list[tuple[_dt.datetime, Partition, str, _Document]] = []
            for partition, docs in self._partitions.items():
                for label, doc in docs.items():
                    if not doc.live(now):
                        assert doc.purge_at is not None
                        due.append((doc.purge_at, partition, label, doc))
                    elif request.retention.past_retention(partition.workspace_id, doc.tier, doc.updated_at, now):
                        due.append((doc.updated_at, partition, label, doc))
            due.sort(key=lambda item: (item[0], _document_order(item[1:])))
            chosen = due[: request.limit]
            infos = [_info(partition, label, doc) for _, partition, label, doc in chosen]
            # Copies of rejected writes to a removed document go with it, as with erasure (P24): the copy
            # of a rejected append is the final body, which holds the document's text.
            swept = {(p.workspace_id, *_owner(p), label) for _, p, label, _doc in chosen}
            copies = [
                (workspace, digest)
                for workspace, records in self._quarantine.items()
                for digest, record in records.items()
                if not _copy_live(record, now) or (workspace, record.agent_id, record.crew_id, record.label) in swept
            ]
            keys = [
                k
                for k, recorded in self._keys.items()
                if request.keys_before is not None and recorded.recorded_at < request.keys_before
            ]
            if not request.dry_run:
                for _, partition, label, _doc in chosen:
                    del self._partitions[partition][label]
                    self._vectors.pop((partition, label), None)
                for workspace, digest in copies:
                    del self._quarantine[workspace][digest]
                for k in keys:
                    del self._keys[k]
        return SweepResult(
            documents=infos, quarantine_removed=len(copies), keys_removed=len(keys), more=len(due) > len(chosen)
        )

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        acquired = self._lock.acquire(timeout=0.1)
        if not acquired:
            if self._lock.held_for() < self.stuck_after:
                return HealthStatus(ok=True, retention_overdue=self._overdue)  # busy: the last count
            return HealthStatus(
                ok=False, message=f"memory provider lock is held by a stuck call (over {self.stuck_after:g} s)"
            )
        try:
            now = clock.now()
            overdue = sum(not doc.live(now) for docs in self._partitions.values() for doc in docs.values())
            self._overdue = overdue
        finally:
            self._lock.release()
        return HealthStatus(ok=True, retention_overdue=overdue)


def _explicit_expiry(request: RetainRequest, old: _Document | None) -> _dt.datetime | None:
    """The explicit expiry a document has after ``request`` (P41); ``old`` is the live document or ``None``.

    :raises InvalidRequest: for an append naming another expiry than the live document's.
    """
    if request.mode == "replace" or old is None:
        return request.expires_at
    if request.expires_at is None or request.expires_at == old.expires_at:
        return old.expires_at
    raise InvalidRequest(expiry_conflict(request.label, old.expires_at), field="expires_at")


def expiry_conflict(label: str, current: _dt.datetime | None) -> str:
    """The message for an append whose ``expires_at`` differs from the live document's (P41)."""
    has = f"expires at {current.isoformat()}" if current is not None else "has no expiry"
    return (
        f"{label} {has}, and an expiry applies to the whole document: append with the same expires_at "
        "(or none), replace the document to give it a new expiry, or write to a document of its own"
    )


def _address(record: QuarantineRecord) -> tuple[str, str, str]:
    return (record.agent_id, record.crew_id, record.label)


def _copy_live(record: QuarantineRecord, now: _dt.datetime) -> bool:
    return record.expires_at is None or record.expires_at > now


def _line_text(index: text.IndexedDocument, number: int) -> str | None:
    """The text of indexed line ``number`` of ``index`` (``None``: no such indexed line)."""
    lines = index.lines
    at = bisect.bisect_left(lines, number, key=_line_number) if lines else 0
    return lines[at].text if at < len(lines) and lines[at].number == number else None


def _line_number(line: text.IndexedLine) -> int:
    return line.number


def _unembedded_lines(
    doc: _Document, vectors: dict[int, tuple[str, str, bytes]], model_id: str
) -> list[tuple[int, str, str]]:
    """``(number, text, digest)`` of the indexed lines of ``doc`` without a vector of ``model_id`` for their text."""
    out = []
    for line in doc.index.lines:
        have = vectors.get(line.number)
        if have is not None and have[1] == model_id:
            digest = have[0]
            if digest == line_digest(line.text):
                continue
        out.append((line.number, line.text, line_digest(line.text)))
    return out


def _document_order(item: tuple[Partition, str, _Document]) -> tuple[str, str, str, str]:
    partition, label, _ = item
    return (partition.workspace_id, partition.kind, partition.owner_id, label)


def _subjects(doc: _Document) -> tuple[str, ...]:
    """The data subjects a document carries (P13): every one that wrote to it."""
    return tuple(sorted(doc.data_subjects))


def _info(partition: Partition, label: str, doc: _Document) -> DocumentInfo:
    return DocumentInfo(
        workspace_id=partition.workspace_id,
        agent_id=partition.owner_id if partition.kind == "agent" else "",
        crew_id=partition.owner_id if partition.kind == "crew" else "",
        tier=doc.tier,
        label=label,
        bytes=doc.size,
        subjects=_subjects(doc),
        digest=doc.digest,
        updated_at=doc.updated_at,
        expires_at=doc.purge_at,
    )


def _scratch(tmp: Path) -> dict[str, Any]:
    return {}


@hookimpl
def memvault_register_providers(register: RegisterProvider) -> None:
    register(
        "memory",
        MemoryProvider,
        capabilities=MemoryProvider.capabilities,
        scratch=_scratch,
        description="in-process reference provider (not durable); for tests and experiments",
        contract_version=CONTRACT_VERSION,
    )
