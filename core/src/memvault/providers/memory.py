"""The ``memory`` provider: complete, thread-safe, in-process, not durable.

It keeps the whole provider contract except surviving the process (no
``durable``/``multi_process`` capability) and is what unit tests and users'
tests reach for, like LangGraph's ``InMemoryStore``.

Layer 5. May import: :mod:`memvault.contract`, :mod:`memvault.hooks` and :mod:`memvault.search`.
"""

from __future__ import annotations

import datetime as _dt
import threading
from pathlib import Path
from typing import Any

import attrs
from attrs import frozen

from memvault import search as text
from memvault.contract.forking import after_fork_in_child
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
)
from memvault.contract.registration import RegisterProvider
from memvault.contract.scanning import check_stored
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
    updated_at: _dt.datetime = attrs.field(factory=lambda: _dt.datetime.now(_dt.timezone.utc))


class MemoryProvider:
    """Documents in a dict, guarded by one lock; an append indexes only what it adds."""

    capabilities = frozenset(
        {Capability.CASCADE_FORGET, Capability.QUARANTINE, Capability.LIST_DOCUMENTS, Capability.CHECKS_STORED}
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._partitions: dict[Partition, dict[str, _Document]] = {}
        # Quarantine copies per workspace, by sha256, in the order they were kept (P30).
        self._quarantine: dict[str, dict[str, QuarantineRecord]] = {}
        after_fork_in_child(self, type(self)._forked)

    def _forked(self) -> None:
        # In a forked child (P35): the child's copy of the documents, under a lock no lost thread holds.
        self._lock = threading.Lock()

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        label = ref.label
        with self._lock:
            docs = self._partitions.setdefault(ref.partition, {})
            old = docs.get(label)
            # The scanner's check of the body this append extends (P29): it may reject, before anything changes.
            check_stored(old.body if old else "", old.digest if old else "")
            final = request.applied_to(old.body if old else "", old.data_subjects if old else ())
            docs[label] = _Document(
                tier=request.tier,
                body=final.body,
                size=final.bytes,
                data_subjects=final.subjects,
                index=text.index_appended(old.index, old.body, final.body)
                if old
                else text.index_document(label, final.body),
                digest=body_sha256(final.body),
            )
        return RetainResult(id=label, bytes=final.bytes, warning=final.warning)

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        query = text.Query.parse(request.query)
        with self._lock:
            docs = [
                doc
                for partition, tiers in request.scopes()
                for doc in self._partitions.get(partition, {}).values()
                if doc.tier in tiers
            ]
        hits = text.search(query, [doc.index for doc in docs], request.limit)
        # Each hit carries its document's digest, so the scanner needs no read-back.
        digests = {doc.index.source: doc.digest for doc in docs}
        return RecallResult(hits=text.with_digests(hits, digests))

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        ref = request.ref
        with self._lock:
            doc = self._partitions.get(ref.partition, {}).get(ref.label)
        return ReadResult(id=ref.label, content=doc.body if doc else "")

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        with self._lock:
            if request.id:
                ref = request.ref
                docs = self._partitions.get(ref.partition, {})
                return ForgetResult(removed=1 if docs.pop(ref.label, None) is not None else 0)
            erased: set[tuple[str, str, str]] = set()
            for partition, docs in self._partitions.items():
                if partition.workspace_id != request.workspace_id:
                    continue
                for label in [lb for lb, d in docs.items() if request.data_subject_id in d.data_subjects]:
                    del docs[label]
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
            return ForgetResult(removed=len(erased))

    @hookimpl
    def memvault_list_documents(self, request: ListDocumentsRequest) -> ListDocumentsResult:
        with self._lock:
            found = [
                _info(partition, label, doc)
                for partition, docs in self._partitions.items()
                for label, doc in docs.items()
                if request.includes(
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
            return list(self._quarantine.get(workspace_id, {}).values())

    @hookimpl
    def memvault_quarantine_get(self, workspace_id: str, sha256: str) -> QuarantineRecord | None:
        with self._lock:
            return self._quarantine.get(workspace_id, {}).get(sha256)

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        acquired = self._lock.acquire(timeout=0.1)
        if not acquired:
            return HealthStatus(ok=False, message="memory provider lock is held by a stuck call")
        self._lock.release()
        return HealthStatus(ok=True)


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
    )
