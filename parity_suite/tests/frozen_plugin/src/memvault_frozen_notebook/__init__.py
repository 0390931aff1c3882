# NEVER UPDATE THIS CODE. A third-party provider written against memvault 0.1.0's
# documentation and template, frozen there on purpose (issue #34): memvault's CI requires
# that it imports and passes the parity suite of the contract version it targets (1.0).
# If memvault breaks it, fix memvault. Its style is its author's, not memvault's.
"""frozen-notebook: a notebook of documents kept in memory, by a third party.

Written from the memvault 0.1.0 docs (writing-a-provider.md) and the template.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import memvault
from memvault import text
from memvault.models import (
    MAX_RECALL_LIMIT,
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
    RetainRequest,
    RetainResult,
    Tier,
    check_cap,
)
from memvault.plugins import RegisterProvider, get_registry
from memvault.scan import body_sha256

NAME = "frozen-notebook"


class Page:
    def __init__(self, label: str, tier: Tier, body: str, subjects: frozenset[str]) -> None:
        self.tier = tier
        self.body = body
        self.size = len(body.encode("utf-8"))
        self.digest = body_sha256(body)
        self.subjects = subjects
        self.index = text.index_document(label, body)
        self.changed = dt.datetime.now(dt.timezone.utc)


class Notebook:
    """Pages in a dict, one lock around it.

    :param title: the notebook's name (any text; two vaults with one title do not share pages).
    """

    capabilities = frozenset({Capability.CASCADE_FORGET, Capability.LIST_DOCUMENTS})

    def __init__(self, title: str = "notebook") -> None:
        self.title = title
        self.lock = threading.Lock()
        self.pages: dict[tuple[Partition, str], Page] = {}

    @memvault.hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        key = (request.ref.partition, request.ref.label)
        with self.lock:
            old = self.pages.get(key)
            before = old.body if old else ""
            body = before + request.content if request.mode == memvault.Mode.APPEND else request.content
            warning = check_cap(request.tier, current=old.size if old else 0, projected=len(body.encode("utf-8")))
            subjects = old.subjects if old else frozenset()
            if request.data_subject_id:
                subjects = subjects | {request.data_subject_id}
            page = Page(request.ref.label, request.tier, body, subjects)
            self.pages[key] = page
        return RetainResult(id=request.ref.label, bytes=page.size, warning=warning)

    @memvault.hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        wanted = dict(request.scopes())
        with self.lock:
            indexes = [p.index for (part, _), p in self.pages.items() if part in wanted and p.tier in wanted[part]]
        limit = min(request.limit, MAX_RECALL_LIMIT) if request.limit > 0 else MAX_RECALL_LIMIT
        return RecallResult(hits=text.search(text.Query.parse(request.query), indexes, limit))

    @memvault.hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        with self.lock:
            page = self.pages.get((request.ref.partition, request.ref.label))
        return ReadResult(id=request.ref.label, content=page.body if page else "")

    @memvault.hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        with self.lock:
            if request.id:
                gone = self.pages.pop((request.ref.partition, request.ref.label), None)
                return ForgetResult(removed=0 if gone is None else 1)
            doomed = [
                key
                for key, page in self.pages.items()
                if key[0].workspace_id == request.workspace_id and request.data_subject_id in page.subjects
            ]
            for key in doomed:
                del self.pages[key]
            return ForgetResult(removed=len(doomed))

    @memvault.hookimpl
    def memvault_list_documents(self, request: ListDocumentsRequest) -> ListDocumentsResult:
        out = []
        with self.lock:
            for (part, label), page in self.pages.items():
                agent = part.owner_id if part.kind == "agent" else ""
                crew = part.owner_id if part.kind == "crew" else ""
                if request.includes(workspace_id=part.workspace_id, agent_id=agent, crew_id=crew, tier=page.tier):
                    out.append(
                        DocumentInfo(
                            workspace_id=part.workspace_id,
                            agent_id=agent,
                            crew_id=crew,
                            tier=page.tier,
                            label=label,
                            bytes=page.size,
                            subjects=tuple(page.subjects),
                            digest=page.digest,
                            updated_at=page.changed,
                        )
                    )
        return ListDocumentsResult(documents=out)

    @memvault.hookimpl
    def memvault_health(self) -> HealthStatus:
        if not self.lock.acquire(timeout=0.1):
            return HealthStatus(ok=False, message="frozen-notebook: the notebook is locked for over 100 ms")
        self.lock.release()
        return HealthStatus(ok=True)

    def close(self) -> None:
        with self.lock:
            self.pages.clear()


def installed() -> bool:
    """Whether memvault sees this provider (for the README's troubleshooting section)."""
    return NAME in get_registry().names()


def scratch(tmp: Path) -> Mapping[str, Any]:
    return {"title": tmp.name}


@memvault.hookimpl
def memvault_register_providers(register: RegisterProvider) -> None:
    register(
        NAME,
        Notebook,
        capabilities=Notebook.capabilities,
        scratch=scratch,
        description="third-party notebook frozen at memvault 0.1.0 (compatibility fixture)",
    )
