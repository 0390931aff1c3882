"""Deliberately broken providers: each breaks one contract line the suite must catch.

Every mutant subclasses the core's ``memory`` provider and changes one verb.
None of these is rejected by the core's types or the Vault facade on its own:
each returns well-typed results (the score mutant bypasses RecallSnippet's
validator with ``object.__setattr__``, as a provider building results some
other way could), so only the parity suite's assertions can kill them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs

from memvault import text
from memvault.markers import hookimpl
from memvault.memory import MemoryProvider, _Document
from memvault.models import (
    Capability,
    ForgetRequest,
    ForgetResult,
    HealthStatus,
    ReadRequest,
    ReadResult,
    RecallRequest,
    RecallResult,
    RecallSnippet,
    RetainRequest,
    RetainResult,
    Tier,
    check_cap,
)


class LeaksAcrossWorkspaces(MemoryProvider):
    """P3: recall searches the same agent/crew in every workspace."""

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        wanted = {(p.kind, p.owner_id): tiers for p, tiers in request.scopes()}
        with self._lock:
            indexes = [
                doc.index
                for part, docs in self._partitions.items()
                for doc in docs.values()
                if (part.kind, part.owner_id) in wanted and doc.tier in wanted[(part.kind, part.owner_id)]
            ]
        return RecallResult(hits=text.search(text.Query.parse(request.query), indexes, request.limit))


class LeaksAcrossAgents(MemoryProvider):
    """P3: recall searches every agent of the workspace."""

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        kinds = {p.kind: tiers for p, tiers in request.scopes()}
        with self._lock:
            indexes = [
                doc.index
                for part, docs in self._partitions.items()
                for doc in docs.values()
                if part.workspace_id == request.workspace_id and part.kind in kinds and doc.tier in kinds[part.kind]
            ]
        return RecallResult(hits=text.search(text.Query.parse(request.query), indexes, request.limit))


class IgnoresLimit(MemoryProvider):
    """P15: returns up to 50 hits whatever the limit."""

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        with self._lock:
            indexes = [
                doc.index
                for partition, tiers in request.scopes()
                for doc in self._partitions.get(partition, {}).values()
                if doc.tier in tiers
            ]
        return RecallResult(hits=text.search(text.Query.parse(request.query), indexes, 50))


class ForgetAlwaysRemovesOne(MemoryProvider):
    """P23: forget by id reports removed=1 even when nothing was there (not idempotent)."""

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        result = super().memvault_forget(request)
        return ForgetResult(removed=max(result.removed, 1)) if request.id else result


class ForgetRaisesWhenMissing(MemoryProvider):
    """P23: forgetting a missing document raises instead of returning 0."""

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        result = super().memvault_forget(request)
        if request.id and result.removed == 0:
            raise KeyError(request.id)
        return result


class AbsolutePathSources(MemoryProvider):
    """P4/P18: hit sources are absolute storage paths."""

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        result = super().memvault_recall(request)
        hits = [attrs.evolve(h, source=f"/var/lib/memvault/{request.workspace_id}/{h.source}") for h in result.hits]
        return RecallResult(hits=hits)


class ScoresAboveOne(MemoryProvider):
    """P18: phrase hits score 1.5 (validator bypassed); the order stays consistent."""

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        result = super().memvault_recall(request)
        for hit in result.hits:
            object.__setattr__(hit, "score", hit.score * 3.0)
        return result


class UnsortedHits(MemoryProvider):
    """P18: hits come back lowest score first."""

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        result = super().memvault_recall(request)
        return RecallResult(hits=sorted(result.hits, key=lambda h: h.score))


class PhraseNotRankedFirst(MemoryProvider):
    """P17: ranks by term statistics only, as if no line held the phrase."""

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        with self._lock:
            indexes = [
                doc.index
                for partition, tiers in request.scopes()
                for doc in self._partitions.get(partition, {}).values()
                if doc.tier in tiers
            ]
        all_hits = text.search(text.Query.parse(request.query), indexes, 10_000)
        flattened = [
            RecallSnippet(
                source=h.source,
                line=h.line,
                snippet=h.snippet,
                score=round((h.score - text.PHRASE_FLOOR) / (1 - text.PHRASE_FLOOR) * 0.49, 6)
                if h.score > text.PHRASE_FLOOR
                else h.score,
            )
            for h in all_hits
        ]
        flattened.sort(key=lambda h: -h.score)
        return RecallResult(hits=flattened[: request.limit])


class ReadOfMissingRaises(MemoryProvider):
    """P21: reading a missing document raises."""

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        result = super().memvault_read(request)
        if not result.content:
            raise FileNotFoundError(result.id)
        return result


class CascadeCrossesWorkspaces(MemoryProvider):
    """P24/P3: forget by data subject deletes in every workspace."""

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if request.id:
            return super().memvault_forget(request)
        removed = 0
        with self._lock:
            for docs in self._partitions.values():
                for label in [lb for lb, d in docs.items() if d.data_subject_id == request.data_subject_id]:
                    del docs[label]
                    removed += 1
        return ForgetResult(removed=removed)


class LosesConcurrentAppends(MemoryProvider):
    """P12: read-modify-write without holding the lock across it."""

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        with self._lock:
            old = self._partitions.get(ref.partition, {}).get(ref.label)
        time.sleep(0.0002)
        body = (old.body if old else "") + request.content if request.mode == "append" else request.content
        size = len(body.encode("utf-8"))
        warning = check_cap(request.tier, current=old.size if old else 0, projected=size)
        with self._lock:
            self._partitions.setdefault(ref.partition, {})[ref.label] = _Document(
                tier=request.tier,
                body=body,
                size=size,
                data_subject_id=request.data_subject_id,
                index=text.index_document(ref.label, body),
            )
        return RetainResult(id=ref.label, bytes=size, warning=warning)


class AppendAddsNewline(MemoryProvider):
    """P6: append inserts a newline between writes."""

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        if request.mode == "append":
            with self._lock:
                old = self._partitions.get(request.ref.partition, {}).get(request.ref.label)
            if old is not None and not old.body.endswith("\n"):
                request = attrs.evolve(request, content="\n" + request.content)
        return super().memvault_retain(request)


class IgnoresCaps(MemoryProvider):
    """P9: stores bodies over the cap."""

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        with self._lock:
            docs = self._partitions.setdefault(ref.partition, {})
            old = docs.get(ref.label)
            body = (old.body if old else "") + request.content if request.mode == "append" else request.content
            size = len(body.encode("utf-8"))
            docs[ref.label] = _Document(
                tier=request.tier, body=body, size=size, data_subject_id="", index=text.index_document(ref.label, body)
            )
        return RetainResult(id=ref.label, bytes=size)


class WritesBeforeCapCheck(MemoryProvider):
    """P9: a write over the cap raises CapExceeded but has already replaced the body."""

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        with self._lock:
            docs = self._partitions.setdefault(ref.partition, {})
            old = docs.get(ref.label)
            body = (old.body if old else "") + request.content if request.mode == "append" else request.content
            size = len(body.encode("utf-8"))
            docs[ref.label] = _Document(
                tier=request.tier, body=body, size=size, data_subject_id="", index=text.index_document(ref.label, body)
            )
            warning = check_cap(request.tier, current=old.size if old else 0, projected=size)
        return RetainResult(id=ref.label, bytes=size, warning=warning)


class NoCapWarning(MemoryProvider):
    """P9: never warns at 80 %."""

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        return attrs.evolve(super().memvault_retain(request), warning="")


class StaleIndexAfterForget(MemoryProvider):
    """P23: forget hides the document from read but recall still finds its lines."""

    def __init__(self) -> None:
        super().__init__()
        self._ghosts: list[text.IndexedDocument] = []

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        with self._lock:
            docs = self._partitions.get(request.ref.partition, {}) if request.id else {}
            doc = docs.get(request.ref.label) if request.id else None
            if doc is not None:
                self._ghosts.append(doc.index)
        return super().memvault_forget(request)

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        with self._lock:
            indexes = [
                doc.index
                for partition, tiers in request.scopes()
                for doc in self._partitions.get(partition, {}).values()
                if doc.tier in tiers
            ] + list(self._ghosts)
        return RecallResult(hits=text.search(text.Query.parse(request.query), indexes, request.limit))


class CaseSensitiveMatching(MemoryProvider):
    """P17: only lines containing the query with the same case match."""

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        result = super().memvault_recall(request)
        words = request.query.split()
        return RecallResult(hits=[h for h in result.hits if any(w in h.snippet for w in words)])


class SnippetMissesTheMatch(MemoryProvider):
    """P18: the snippet is the line's first 500 characters, wherever the match is."""

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        result = super().memvault_recall(request)
        hits = []
        for hit in result.hits:
            body = (
                super()
                .memvault_read(
                    ReadRequest(
                        workspace_id=request.workspace_id,
                        agent_id=request.agent_id or "x",
                        crew_id=request.crew_id or "x",
                        tier=_tier_of(hit.source),
                        key=_key_of(hit.source),
                    )
                )
                .content
            )
            hits.append(attrs.evolve(hit, snippet=body.splitlines()[hit.line - 1][:500]))
        return RecallResult(hits=hits)


class CascadeSilentlyUnsupported(MemoryProvider):
    """P24: without cascade_forget, forget by data subject quietly returns 0 instead of NotSupported."""

    capabilities = frozenset()

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if request.data_subject_id:
            return ForgetResult(removed=0)
        return super().memvault_forget(request)


class UnhealthyMessageWhenOk(MemoryProvider):
    """P25: ok=True but a non-empty message."""

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        return HealthStatus(ok=True, message="all good")


class SlowHealth(MemoryProvider):
    """P26: the probe takes 300 ms, over a local provider's 200 ms."""

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        time.sleep(0.3)
        return HealthStatus(ok=True)


class CrashesUnderThreads(MemoryProvider):
    """P28: recall iterates the live dict without the lock; concurrent writes make it raise."""

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        indexes = []
        for partition, tiers in request.scopes():
            for doc in self._partitions.get(partition, {}).values():
                time.sleep(0.0001)
                if doc.tier in tiers:
                    indexes.append(doc.index)
        return RecallResult(hits=text.search(text.Query.parse(request.query), indexes, request.limit))

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        result = super().memvault_retain(request)
        with self._lock:  # churn: a short-lived, never-searched sibling entry per write
            docs = self._partitions.setdefault(request.ref.partition, {})
            label = f"tmp{time.perf_counter_ns()}"
            docs[label] = _Document(
                tier=Tier.LESSONS, body="", size=0, data_subject_id="", index=text.index_document(label, "")
            )
            for old in [lb for lb in docs if lb.startswith("tmp")][:-1]:
                del docs[old]
        return result


def _tier_of(label: str) -> str:
    from memvault.models import parse_label

    return parse_label(label)[0].value


def _key_of(label: str) -> str:
    from memvault.models import parse_label

    return parse_label(label)[1]


@attrs.frozen
class Mutant:
    factory: Callable[[], Any]
    selection: str  # a -k expression: the suite tests aimed at this contract line
    capabilities: frozenset[str] = frozenset({Capability.CASCADE_FORGET})


MUTANTS: dict[str, Mutant] = {
    "control-unmutated": Mutant(MemoryProvider, "partition or limit or forget or score or phrase or thread"),
    "leaks-across-workspaces": Mutant(LeaksAcrossWorkspaces, "never_returns_another_workspaces or interleaved"),
    "leaks-across-agents": Mutant(LeaksAcrossAgents, "never_returns_another_agents"),
    "ignores-limit": Mutant(IgnoresLimit, "limit or twenty"),
    "forget-always-removes-one": Mutant(ForgetAlwaysRemovesOne, "forget"),
    "forget-raises-when-missing": Mutant(ForgetRaisesWhenMissing, "forget"),
    "absolute-path-sources": Mutant(AbsolutePathSources, "source"),
    "scores-above-one": Mutant(ScoresAboveOne, "score"),
    "unsorted-hits": Mutant(UnsortedHits, "sorted"),
    "phrase-not-ranked-first": Mutant(PhraseNotRankedFirst, "phrase"),
    "read-of-missing-raises": Mutant(ReadOfMissingRaises, "read"),
    "cascade-crosses-workspaces": Mutant(CascadeCrossesWorkspaces, "subject"),
    "loses-concurrent-appends": Mutant(LosesConcurrentAppends, "concurrent_appends"),
    "append-adds-newline": Mutant(AppendAddsNewline, "append"),
    "ignores-caps": Mutant(IgnoresCaps, "cap"),
    "writes-before-cap-check": Mutant(WritesBeforeCapCheck, "cap"),
    "no-cap-warning": Mutant(NoCapWarning, "warning"),
    "stale-index-after-forget": Mutant(StaleIndexAfterForget, "forget"),
    "case-sensitive-matching": Mutant(CaseSensitiveMatching, "case_insensitive"),
    "snippet-misses-the-match": Mutant(SnippetMissesTheMatch, "snippet"),
    "cascade-silently-unsupported": Mutant(CascadeSilentlyUnsupported, "subject", frozenset()),
    # the plain memory provider claiming what it cannot keep: its writes die with the process
    "claims-durable-and-multi-process": Mutant(
        MemoryProvider,
        "kill_9 or reopening or another_process or from_processes",
        frozenset({Capability.CASCADE_FORGET, Capability.DURABLE, Capability.MULTI_PROCESS}),
    ),
    "ok-health-with-message": Mutant(UnhealthyMessageWhenOk, "health"),
    "slow-health": Mutant(SlowHealth, "answers_within"),
    "crashes-under-threads": Mutant(CrashesUnderThreads, "many_threads"),
}
