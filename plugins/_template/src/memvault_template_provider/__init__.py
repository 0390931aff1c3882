"""A tiny, complete memvault provider: documents in a dictionary.

Replace the dictionary with your storage. What makes it a provider:

* a class whose methods carry ``@memvault.hookimpl`` for the five verbs
  (retain, recall, read, forget, health), all thread-safe;
* a module-level ``memvault_register_providers`` hook that registers it by
  name, with its capabilities and ``scratch`` settings for an empty store;
* the entry point in ``pyproject.toml`` pointing at this module.

Optional hooks add capabilities: ``memvault_list_documents`` (declare
``list_documents``) lets ``memvault export``/``inspect`` enumerate the store.
Calling ``memvault.check_stored`` in retain (declare ``checks_stored``) lets the
scanner check an append's stored body inside your write instead of reading it
back first.

Requests arrive validated (identifiers, tiers, modes, keys, limits): do not
check them again. Enforce the size cap with ``check_cap`` before writing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import memvault
from memvault import (
    Capability,
    DocumentInfo,
    ForgetRequest,
    ForgetResult,
    HealthStatus,
    ListDocumentsRequest,
    ListDocumentsResult,
    Partition,
    ReadRequest,
    ReadResult,
    RecallRequest,
    RecallResult,
    RegisterProvider,
    RetainRequest,
    RetainResult,
    Tier,
)
from memvault import search as text
from memvault.contract.locks import HeldLock

__all__ = ["TemplateProvider"]

#: The name users put in memvault.toml (`provider = "template-provider"`).
NAME = "template-provider"


class _Entry:
    """One stored document: its body, what it belongs to, and its search index.

    ``subjects`` holds every data subject that ever wrote to the document
    (contract P13): a later write adds to it and never removes one; the set goes
    away with the document.
    """

    __slots__ = ("body", "digest", "index", "size", "subjects", "tier", "updated_at")

    def __init__(
        self, label: str, tier: Tier, body: str, subjects: frozenset[str], before: _Entry | None = None
    ) -> None:
        self.tier = tier
        self.body = body
        self.size = len(body.encode("utf-8"))
        self.digest = memvault.body_sha256(body)
        self.subjects = subjects
        # An append re-indexes only what it adds (and the stored body's last line), not the whole document.
        self.index: text.IndexedDocument = (
            text.index_appended(before.index, before.body, body) if before else text.index_document(label, body)
        )
        self.updated_at = dt.datetime.now(dt.timezone.utc)


class TemplateProvider:
    """Keeps every document in memory, keyed by (partition, label). Not durable.

    :param namespace: an example setting; settings are the factory's keyword
        arguments and arrive from memvault.toml or ``--option key=value``.
    """

    capabilities = frozenset({Capability.CASCADE_FORGET, Capability.LIST_DOCUMENTS, Capability.CHECKS_STORED})

    #: A call that has held the store's lock this long is stuck. Busy is healthy (P25): a call of this store
    #: holds the lock for microseconds, but on a loaded machine a thread the scheduler put aside holds it for
    #: longer than health may wait (P26: 200 ms). So health waits 100 ms, then asks the lock how long its
    #: holder has held it (HeldLock), and reports only a call held past this.
    stuck_after: float = 5.0

    def __init__(self, namespace: str = "default") -> None:
        self.namespace = namespace
        self._guard = HeldLock()
        self._store: dict[tuple[Partition, str], _Entry] = {}
        # A vault opened before os.fork() is used in the child too (contract P35): the child gets a copy
        # of everything, but a lock another thread held at the fork stays held there for ever. Replace
        # locks (and connections, pools, threads: never close the parent's) in the child.
        memvault.after_fork_in_child(self, TemplateProvider._forked)

    def _forked(self) -> None:
        self._guard = HeldLock()

    @memvault.hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        where = (ref.partition, ref.label)
        with self._guard:  # one lock makes read-modify-write atomic: concurrent appends lose nothing
            before = self._store.get(where)
            # Hand the scanner the body this append extends (capability checks_stored): it raises
            # ContentRejected when the final body fails the scan, and then nothing may change.
            memvault.check_stored(before.body if before else "", before.digest if before else "")
            # The final body, its size, the cap check (raises CapExceeded before anything
            # changes) and the data subjects, as every provider computes them.
            final = request.applied_to(before.body if before else "", before.subjects if before else ())
            entry = _Entry(ref.label, request.tier, final.body, final.subjects, before)
            self._store[where] = entry
        return RetainResult(id=ref.label, bytes=final.bytes, warning=final.warning)

    @memvault.hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        scopes = dict(request.scopes())
        with self._guard:
            indexes = [
                entry.index
                for (partition, _label), entry in self._store.items()
                if partition in scopes and entry.tier in scopes[partition]
            ]
        return RecallResult(hits=text.search(text.Query.parse(request.query), indexes, request.limit))

    @memvault.hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        ref = request.ref
        with self._guard:
            entry = self._store.get((ref.partition, ref.label))
        return ReadResult(id=ref.label, content=entry.body if entry is not None else "")

    @memvault.hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        with self._guard:
            if request.id:
                ref = request.ref
                return ForgetResult(removed=int(self._store.pop((ref.partition, ref.label), None) is not None))
            doomed = [
                key
                for key, entry in self._store.items()
                # Exact membership (P13): no prefix, no case folding, no wildcards.
                if key[0].workspace_id == request.workspace_id and request.data_subject_id in entry.subjects
            ]
            for key in doomed:
                del self._store[key]
            return ForgetResult(removed=len(doomed))

    @memvault.hookimpl
    def memvault_list_documents(self, request: ListDocumentsRequest) -> ListDocumentsResult:
        """Optional: enumerate documents without their bodies (the ``list_documents`` capability)."""
        found = []
        with self._guard:
            for (partition, label), entry in self._store.items():
                agent_id = partition.owner_id if partition.kind == "agent" else ""
                crew_id = partition.owner_id if partition.kind == "crew" else ""
                if request.includes(
                    workspace_id=partition.workspace_id, agent_id=agent_id, crew_id=crew_id, tier=entry.tier
                ):
                    found.append(
                        DocumentInfo(
                            workspace_id=partition.workspace_id,
                            agent_id=agent_id,
                            crew_id=crew_id,
                            tier=entry.tier,
                            label=label,
                            bytes=entry.size,
                            subjects=tuple(entry.subjects),
                            digest=entry.digest,
                            updated_at=entry.updated_at,
                        )
                    )
        return ListDocumentsResult(documents=found)  # the result sorts them

    @memvault.hookimpl
    def memvault_health(self) -> HealthStatus:
        if not self._guard.acquire(timeout=0.1):
            if self._guard.held_for() < self.stuck_after:
                return HealthStatus(ok=True)  # busy, not stuck
            return HealthStatus(
                ok=False, message=f"{NAME}: a call has held the store lock for over {self.stuck_after:g} s"
            )
        self._guard.release()
        return HealthStatus(ok=True)

    def close(self) -> None:
        """Release resources (connections, files). Called once by Vault.close()."""
        with self._guard:
            self._store.clear()


def _scratch(tmp: Path) -> Mapping[str, Any]:
    """Settings for a fresh, empty store in ``tmp`` (used by `memvault parity NAME`)."""
    return {"namespace": tmp.name}


@memvault.hookimpl
def memvault_register_providers(register: RegisterProvider) -> None:
    register(
        NAME,
        TemplateProvider,
        capabilities=TemplateProvider.capabilities,
        scratch=_scratch,
        description="template provider: documents in memory (copy me)",
        contract_version="1.3",  # the contract.md version you wrote and tested it against
    )
