"""Deliberately broken providers: each breaks one contract line the suite must catch.

Every mutant subclasses the core's ``memory`` provider and changes one thing.
Its docstring starts with the contract lines it breaks ("P9/P5: ...") and ends
with "Killed by: test_a, test_b." naming the suite tests that must fail on it:
the harness runs exactly those tests against it. ``docs/contract-coverage.md``
lists the mutants per contract line. The controls at the end are legitimate
providers (another ranking engine, a provider that does not name itself in
``NotSupported``, the transactional memory provider with a write group that the
P34 mutants break) that the suite must pass, so it stays fair to them.
None of these is rejected by the core's types or the Vault facade on its own:
each returns well-typed results (the score mutant bypasses RecallSnippet's
validator with ``object.__setattr__``, as a provider building results some
other way could), so only the parity suite's assertions can kill them.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import attrs

from memvault import search as text
from memvault.contract import clock
from memvault.contract.embedding import PendingLine, line_digest, vectors_from_bytes
from memvault.contract.errors import CapExceeded, MemvaultError, NotSupported
from memvault.contract.models import (
    Capability,
    ForgetRequest,
    ForgetResult,
    HealthStatus,
    Partition,
    QuarantineRecord,
    ReadRequest,
    ReadResult,
    RecallRequest,
    RecallResult,
    RecallSnippet,
    RetainRequest,
    RetainResult,
    Tier,
    body_sha256,
    check_cap,
)
from memvault.contract.retention import SweepRequest, SweepResult
from memvault.contract.scanning import check_stored
from memvault.hooks.markers import hookimpl
from memvault.providers.memory import MemoryProvider, _Document, _Key


class LeaksAcrossWorkspaces(MemoryProvider):
    """P3: recall searches the same agent/crew in every workspace.

    Killed by: test_recall_never_returns_another_workspaces_lines.
    """

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
    """P3: recall searches every agent of the workspace.

    Killed by: test_recall_never_returns_another_agents_lines.
    """

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
    """P15: returns up to 50 hits whatever the limit.

    Killed by: test_limit_within_range_is_respected.
    """

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
    """P23: forget by id reports removed=1 even when nothing was there (not idempotent).

    Killed by: test_forget_twice_removes_zero.
    """

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        result = super().memvault_forget(request)
        return ForgetResult(removed=max(result.removed, 1)) if request.id else result


class ForgetRaisesWhenMissing(MemoryProvider):
    """P23: forgetting a missing document raises instead of returning 0.

    Killed by: test_forget_twice_removes_zero.
    """

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        result = super().memvault_forget(request)
        if request.id and result.removed == 0:
            raise KeyError(request.id)
        return result


class AbsolutePathSources(MemoryProvider):
    """P4/P18: hit sources are absolute storage paths.

    Killed by: test_hit_source_is_the_document_label, test_hit_sources_never_reveal_paths_or_storage_layout.
    """

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        result = super().memvault_recall(request)
        hits = [attrs.evolve(h, source=f"/var/lib/memvault/{request.workspace_id}/{h.source}") for h in result.hits]
        return RecallResult(hits=hits)


class ScoresAboveOne(MemoryProvider):
    """P18: phrase hits score 1.5 (validator bypassed); the order stays consistent.

    Killed by: test_scores_are_between_zero_and_one.
    """

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        result = super().memvault_recall(request)
        for hit in result.hits:
            object.__setattr__(hit, "score", hit.score * 3.0)
        return result


class UnsortedHits(MemoryProvider):
    """P18: hits come back lowest score first.

    Killed by: test_hits_are_sorted_by_score_highest_first.
    """

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        result = super().memvault_recall(request)
        return RecallResult(hits=sorted(result.hits, key=lambda h: h.score))


class PhraseNotRankedFirst(MemoryProvider):
    """P17: ranks by term statistics only, as if no line held the phrase.

    Killed by: test_phrase_lines_rank_above_term_only_lines, test_phrase_lines_fill_the_limit_before_term_only_lines.
    """

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
    """P21: reading a missing document raises.

    Killed by: test_read_of_a_missing_document_is_an_empty_body.
    """

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        result = super().memvault_read(request)
        if not result.content:
            raise FileNotFoundError(result.id)
        return result


class CascadeCrossesWorkspaces(MemoryProvider):
    """P24/P3: forget by data subject deletes in every workspace.

    Killed by: test_forget_by_subject_never_touches_another_workspace.
    """

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if request.id:
            return super().memvault_forget(request)
        removed = 0
        with self._lock:
            for docs in self._partitions.values():
                for label in [lb for lb, d in docs.items() if request.data_subject_id in d.data_subjects]:
                    del docs[label]
                    removed += 1
        return ForgetResult(removed=removed)


class LosesConcurrentAppends(MemoryProvider):
    """P12: read-modify-write without holding the lock across it.

    Killed by: test_concurrent_appends_from_threads_lose_nothing.
    """

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
                data_subjects=frozenset({request.data_subject_id} - {""}),
                index=text.index_document(ref.label, body),
                digest="",
            )
        return RetainResult(id=ref.label, bytes=size, warning=warning)


class AppendAddsNewline(MemoryProvider):
    """P6: append inserts a newline between writes.

    Killed by: test_append_concatenates_raw_bytes_without_separator.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        if request.mode == "append":
            with self._lock:
                old = self._partitions.get(request.ref.partition, {}).get(request.ref.label)
            if old is not None and not old.body.endswith("\n"):
                request = attrs.evolve(request, content="\n" + request.content)
        return super().memvault_retain(request)


class IgnoresCaps(MemoryProvider):
    """P9: stores bodies over the cap.

    Killed by: test_one_byte_over_the_cap_raises_cap_exceeded.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        with self._lock:
            docs = self._partitions.setdefault(ref.partition, {})
            old = docs.get(ref.label)
            body = (old.body if old else "") + request.content if request.mode == "append" else request.content
            size = len(body.encode("utf-8"))
            docs[ref.label] = _Document(
                tier=request.tier,
                body=body,
                size=size,
                index=text.index_document(ref.label, body),
                data_subjects=frozenset(),
                digest="",
            )
        return RetainResult(id=ref.label, bytes=size)


class WritesBeforeCapCheck(MemoryProvider):
    """P9: a write over the cap raises CapExceeded but has already replaced the body.

    Killed by: test_cap_exceeded_leaves_the_stored_document_unchanged.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        with self._lock:
            docs = self._partitions.setdefault(ref.partition, {})
            old = docs.get(ref.label)
            body = (old.body if old else "") + request.content if request.mode == "append" else request.content
            size = len(body.encode("utf-8"))
            docs[ref.label] = _Document(
                tier=request.tier,
                body=body,
                size=size,
                index=text.index_document(ref.label, body),
                data_subjects=frozenset(),
                digest="",
            )
            warning = check_cap(request.tier, current=old.size if old else 0, projected=size)
        return RetainResult(id=ref.label, bytes=size, warning=warning)


class NoCapWarning(MemoryProvider):
    """P9: never warns at 80 %.

    Killed by: test_warning_at_exactly_80_percent.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        return attrs.evolve(super().memvault_retain(request), warning="")


class StaleIndexAfterForget(MemoryProvider):
    """P23: forget hides the document from read but recall still finds its lines.

    Killed by: test_forgotten_text_is_not_recalled.
    """

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
    """P17: only lines containing the query with the same case match.

    Killed by: test_matching_is_case_insensitive.
    """

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        result = super().memvault_recall(request)
        words = request.query.split()
        return RecallResult(hits=[h for h in result.hits if any(w in h.snippet for w in words)])


class SnippetMissesTheMatch(MemoryProvider):
    """P18: the snippet is the line's first 500 characters, wherever the match is.

    Killed by: test_snippet_is_at_most_500_characters_and_contains_the_match.
    """

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
    """P24: without cascade_forget, forget by data subject quietly returns 0 instead of NotSupported.

    Killed by: test_forget_by_subject_without_capability_is_not_supported_naming_the_provider.
    """

    capabilities = frozenset()

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if request.data_subject_id:
            return ForgetResult(removed=0)
        return super().memvault_forget(request)


class UnhealthyMessageWhenOk(MemoryProvider):
    """P25: ok=True but a non-empty message.

    Killed by: test_health_of_a_fresh_store_is_ok_with_an_empty_message.
    """

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        return HealthStatus(ok=True, message="all good")


class SlowHealth(MemoryProvider):
    """P26: the probe takes 300 ms, over a local provider's 200 ms.

    Killed by: test_health_answers_within_its_deadline.
    """

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        time.sleep(0.3)
        return HealthStatus(ok=True)


class CrashesUnderThreads(MemoryProvider):
    """P28: recall iterates the live dict without the lock; concurrent writes make it raise.

    Killed by: test_every_verb_is_safe_from_many_threads.
    """

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
                tier=Tier.LESSONS,
                body="",
                size=0,
                data_subjects=frozenset(),
                index=text.index_document(label, ""),
                digest="",
            )
            for old in [lb for lb in docs if lb.startswith("tmp")][:-1]:
                del docs[old]
        return result


class LockLostAtFork(MemoryProvider):
    """P35: resets nothing in a forked child, so the child keeps the lock a writer thread of the parent
    held at the fork, and its first write waits for ever (a provider with a lock and no fork handling).

    Killed by: test_after_a_fork_each_process_gets_its_own_answers.
    """

    def _forked(self) -> None:
        pass


def _tier_of(label: str) -> str:
    from memvault.contract.models import parse_label

    return parse_label(label)[0].value


def _key_of(label: str) -> str:
    from memvault.contract.models import parse_label

    return parse_label(label)[1]


# -- building blocks for the mutants below ---------------------------------------------


class _Keyed(dict):  # type: ignore[type-arg]
    """A dict that stores every key through ``key``: how a backend that derives storage keys sees ids."""

    def __init__(self, key: Callable[[Any], Any], inner: Callable[[], Any] = dict) -> None:
        super().__init__()
        self._key = key
        self._inner = inner

    def setdefault(self, k: Any, default: Any = None) -> Any:
        k = self._key(k)
        if not dict.__contains__(self, k):
            dict.__setitem__(self, k, self._inner())
        return dict.__getitem__(self, k)

    def get(self, k: Any, default: Any = None) -> Any:
        return dict.get(self, self._key(k), default)

    def __getitem__(self, k: Any) -> Any:
        return dict.__getitem__(self, self._key(k))

    def __setitem__(self, k: Any, v: Any) -> None:
        dict.__setitem__(self, self._key(k), v)

    def __delitem__(self, k: Any) -> None:
        dict.__delitem__(self, self._key(k))

    def __contains__(self, k: object) -> bool:
        return dict.__contains__(self, self._key(k))

    def pop(self, k: Any, *default: Any) -> Any:
        return dict.pop(self, self._key(k), *default)


def _final_document(request: RetainRequest, final: Any) -> _Document:
    """The document a retain stores: ``final`` is ``request.applied_to(...)``'s outcome."""
    return _Document(
        tier=request.tier,
        body=final.body,
        size=final.bytes,
        data_subjects=final.subjects,
        index=text.index_document(request.ref.label, final.body),
        digest=body_sha256(final.body),
    )


def _doc(tier: Tier, label: str, body: str, subjects: frozenset[str] = frozenset()) -> _Document:
    return _Document(
        tier=tier,
        body=body,
        size=len(body.encode("utf-8")),
        data_subjects=subjects,
        index=text.index_document(label, body),
        digest="",
    )


class _Rewriting(MemoryProvider):
    """The reference provider behind a hook: ``rewrite`` changes each request, ``scopes`` what recall searches."""

    def rewrite(self, request: Any) -> Any:
        return request

    def scopes(self, request: RecallRequest) -> list[tuple[Partition, tuple[Tier, ...]]]:
        return list(request.scopes())

    def rank(self, request: RecallRequest, indexes: list[text.IndexedDocument]) -> list[RecallSnippet]:
        return text.search(text.Query.parse(request.query), indexes, request.limit)

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        return super().memvault_retain(self.rewrite(request))

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        return super().memvault_read(self.rewrite(request))

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        return super().memvault_forget(self.rewrite(request))

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        request = self.rewrite(request)
        with self._lock:
            indexes = [
                doc.index
                for partition, tiers in self.scopes(request)
                for doc in self._partitions.get(partition, {}).values()
                if doc.tier in tiers
            ]
        return RecallResult(hits=self.rank(request, indexes))


def _tier(request: Any) -> Tier | None:
    if isinstance(request, ForgetRequest):
        return request.ref.tier if request.id else None
    return getattr(request, "tier", None)


# -- identifiers and partitions (P3) ---------------------------------------------------


class CaseInsensitiveIds(MemoryProvider):
    """P3: workspace, agent and crew ids are compared case-insensitively (a case-folding key or collation).

    Killed by: test_look_alike_identifiers_never_share_a_document.
    """

    def __init__(self) -> None:
        super().__init__()
        self._partitions = _Keyed(
            lambda p: Partition(workspace_id=p.workspace_id.casefold(), kind=p.kind, owner_id=p.owner_id.casefold())
        )


class CaseInsensitiveLabels(MemoryProvider):
    """P3/P7: peer slugs are compared case-insensitively (files on a case-insensitive file system).

    Killed by: test_look_alike_identifiers_never_share_a_document.
    """

    def __init__(self) -> None:
        super().__init__()
        self._partitions = _Keyed(lambda p: p, inner=lambda: _Keyed(str.casefold))


def _joined(sep: str) -> type[MemoryProvider]:
    class JoinedKeys(MemoryProvider):
        def __init__(self) -> None:
            super().__init__()
            self._partitions = _Keyed(
                lambda p: Partition(workspace_id=f"{p.workspace_id}{sep}{p.owner_id}", kind=p.kind, owner_id="")
            )

        @hookimpl
        def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
            if request.id:
                return super().memvault_forget(request)
            removed = 0
            with self._lock:  # erasure scans the keys of the workspace: those starting with "<ws><sep>"
                for partition, docs in self._partitions.items():
                    if partition.workspace_id.startswith(request.workspace_id + sep):
                        for label in [lb for lb, d in docs.items() if request.data_subject_id in d.data_subjects]:
                            del docs[label]
                            removed += 1
            return ForgetResult(removed=removed)

    JoinedKeys.__doc__ = (
        f"P3: the storage key joins workspace and owner with {sep!r}, so ('w{sep}x', 'y') and ('w', 'x{sep}y') meet."
        "\n\n    Killed by: test_look_alike_identifiers_never_share_a_document.\n    "
    )
    JoinedKeys.__name__ = JoinedKeys.__qualname__ = (
        f"JoinedKeys{ {':': 'Colon', '@': 'At', '.': 'Dot', '-': 'Dash'}[sep] }"
    )
    return JoinedKeys


class PrefixScanRecall(_Rewriting):
    """P3: recall finds a partition's documents by key prefix, so `agent-1` also reads `agent-10`.

    Killed by: test_look_alike_identifiers_never_share_a_document.
    """

    def scopes(self, request: RecallRequest) -> list[tuple[Partition, tuple[Tier, ...]]]:
        wanted = list(request.scopes())
        return [
            (stored, tiers)
            for partition, tiers in wanted
            for stored in list(self._partitions)
            if stored.kind == partition.kind
            and stored.workspace_id.startswith(partition.workspace_id)
            and stored.owner_id.startswith(partition.owner_id)
        ]


class PrefixForget(MemoryProvider):
    """P3/P23: forget by id deletes every document whose key starts with the label's stem (`peers/bob*`).

    Killed by: test_look_alike_identifiers_never_share_a_document.
    """

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if not request.id:
            return super().memvault_forget(request)
        stem = request.id.removesuffix(".md")
        with self._lock:
            docs = self._partitions.get(request.ref.partition, {})
            doomed = [label for label in docs if label.startswith(stem)]
            for label in doomed:
                del docs[label]
        return ForgetResult(removed=1 if request.id in doomed else 0)


class PrefixErasure(MemoryProvider):
    """P3/P24: erasure by data subject selects workspaces by prefix (`LIKE 'ws%'`).

    Killed by: test_forget_by_subject_never_touches_another_workspace.
    """

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if request.id:
            return super().memvault_forget(request)
        removed = 0
        with self._lock:
            for partition, docs in self._partitions.items():
                if partition.workspace_id.startswith(request.workspace_id):
                    for label in [lb for lb, d in docs.items() if request.data_subject_id in d.data_subjects]:
                        del docs[label]
                        removed += 1
        return ForgetResult(removed=removed)


def _shared_per_workspace(tier: Tier) -> type[MemoryProvider]:
    class SharedPerWorkspace(_Rewriting):
        def rewrite(self, request: Any) -> Any:
            if _tier(request) is tier:
                return attrs.evolve(request, agent_id="all-agents")
            return request

        def scopes(self, request: RecallRequest) -> list[tuple[Partition, tuple[Tier, ...]]]:
            out = list(request.scopes())
            for partition, tiers in list(out):
                if partition.kind == "agent" and tier in tiers:
                    out.append((attrs.evolve(partition, owner_id="all-agents"), (tier,)))
            return out

    SharedPerWorkspace.__doc__ = (
        f"P3: the {tier.value} tier is kept once per workspace, not per agent."
        "\n\n    Killed by: test_every_agent_tier_is_private_to_its_agent.\n    "
    )
    SharedPerWorkspace.__name__ = SharedPerWorkspace.__qualname__ = f"{tier.name.title()}SharedPerWorkspace"
    return SharedPerWorkspace


class AgentTierFiledUnderCrew(_Rewriting):
    """P2/P3: an agent tier written with a crew_id too is filed under the crew, for all its agents.

    Killed by: test_an_agent_tier_written_with_a_crew_id_stays_the_agents.
    """

    def rewrite(self, request: Any) -> Any:
        tier = _tier(request)
        if tier is not None and tier is not Tier.CREW and request.crew_id:
            return attrs.evolve(request, agent_id=f"crew.{request.crew_id}")
        return request

    def scopes(self, request: RecallRequest) -> list[tuple[Partition, tuple[Tier, ...]]]:
        out = list(request.scopes())
        if request.crew_id and request.tier is not Tier.CREW:
            partition = Partition(workspace_id=request.workspace_id, kind="agent", owner_id=f"crew.{request.crew_id}")
            out.append((partition, (request.tier,) if request.tier else tuple(t for t in Tier if t.is_agent_tier)))
        return out


class NamedTierAddsCrew(_Rewriting):
    """P16: recall with a named agent tier and a crew_id also returns CREW.md hits.

    Killed by: test_a_named_tier_with_both_ids_searches_only_that_tier.
    """

    def scopes(self, request: RecallRequest) -> list[tuple[Partition, tuple[Tier, ...]]]:
        out = list(request.scopes())
        if request.tier is not None and request.tier is not Tier.CREW and request.crew_id:
            out.append(
                (Partition(workspace_id=request.workspace_id, kind="crew", owner_id=request.crew_id), (Tier.CREW,))
            )
        return out


class NamedTierIgnoredWithBothIds(_Rewriting):
    """P16: with both agent_id and crew_id the named tier is dropped and every readable tier is searched.

    Killed by: test_a_named_tier_with_both_ids_searches_only_that_tier.
    """

    def rewrite(self, request: Any) -> Any:
        if isinstance(request, RecallRequest) and request.agent_id and request.crew_id:
            return attrs.evolve(request, tier=None)
        return request


class CrewNeverSearched(_Rewriting):
    """P16: recall without a tier ignores crew_id.

    Killed by: test_recall_without_tier_adds_crew_only_when_crew_id_is_given.
    """

    def scopes(self, request: RecallRequest) -> list[tuple[Partition, tuple[Tier, ...]]]:
        if request.tier is None:
            return [(p, t) for p, t in request.scopes() if p.kind == "agent"]
        return list(request.scopes())


class ForgetByLabelAcrossAgents(MemoryProvider):
    """P3/P23: forget by id removes that label from every agent of the workspace.

    Killed by: test_forget_never_removes_another_agents_document.
    """

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if not request.id:
            return super().memvault_forget(request)
        removed = 0
        with self._lock:
            for partition, docs in self._partitions.items():
                if partition.workspace_id == request.workspace_id and partition.kind == request.ref.partition.kind:
                    removed += docs.pop(request.id, None) is not None
        return ForgetResult(removed=min(removed, 1))


# -- retain: keys, modes, sizes, caps (P5, P7, P9, P10) -----------------------------------


class DailyDatesShareOneDocument(_Rewriting):
    """P7: every daily key lands in one document.

    Killed by: test_daily_dates_are_separate_documents.
    """

    def rewrite(self, request: Any) -> Any:
        if isinstance(request, (RetainRequest, ReadRequest)) and request.tier is Tier.DAILY:
            return attrs.evolve(request, key="2000-01-01")
        return request


class ReplaceAppends(_Rewriting):
    """P5: replace behaves as append.

    Killed by: test_replace_overwrites_the_body.
    """

    def rewrite(self, request: Any) -> Any:
        if isinstance(request, RetainRequest):
            return attrs.evolve(request, mode="append")
        return request


class BytesCountsCharacters(MemoryProvider):
    """P10: the result's bytes counts characters, not UTF-8 bytes.

    Killed by: test_retain_bytes_is_the_stored_utf8_size.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        result = super().memvault_retain(request)
        with self._lock:
            body = self._partitions[request.ref.partition][request.ref.label].body
        return attrs.evolve(result, bytes=len(body))


class _CapMutant(MemoryProvider):
    """Retain with a hook between the cap check and the write, for the cap mutants."""

    def projected(self, old: _Document | None, request: RetainRequest, size: int) -> int:
        return size

    def refused(self, docs: dict[str, _Document], old: _Document | None, request: RetainRequest, body: str) -> None:
        """What the backend has already done when the cap check refuses the write (default: nothing)."""

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        with self._lock:
            docs = self._partitions.setdefault(ref.partition, {})
            old = docs.get(ref.label)
            body = (old.body if old else "") + request.content if request.mode == "append" else request.content
            size = len(body.encode("utf-8"))
            try:
                warning = check_cap(
                    request.tier, current=old.size if old else 0, projected=self.projected(old, request, size)
                )
            except CapExceeded:
                self.refused(docs, old, request, body)
                raise
            subjects = (old.data_subjects if old else frozenset()) | ({request.data_subject_id} - {""})
            docs[ref.label] = _doc(request.tier, ref.label, body, subjects)
        return RetainResult(id=ref.label, bytes=size, warning=warning)


class ReplaceProjectedAsAppend(_CapMutant):
    """P9/P5: the cap check projects a replace as old body + new content.

    Killed by: test_replace_is_capped_on_the_new_body_alone.
    """

    def projected(self, old: _Document | None, request: RetainRequest, size: int) -> int:
        return size + (old.size if old and request.mode == "replace" else 0)


class IndexedBeforeCapCheck(_CapMutant):
    """P9: the search index is updated before the cap check, so a refused write is still found by recall.

    Killed by: test_a_refused_write_is_never_recalled.
    """

    def refused(self, docs: dict[str, _Document], old: _Document | None, request: RetainRequest, body: str) -> None:
        if old is not None:
            docs[request.ref.label] = attrs.evolve(old, index=text.index_document(request.ref.label, body))


class RefusedWriteCreatesDocument(_CapMutant):
    """P9/P23: a refused first write leaves an empty document behind (row inserted before the check).

    Killed by: test_a_refused_write_to_a_new_document_creates_nothing.
    """

    def refused(self, docs: dict[str, _Document], old: _Document | None, request: RetainRequest, body: str) -> None:
        if old is None:
            docs[request.ref.label] = _doc(request.tier, request.ref.label, "")


class RefusedWriteTags(_CapMutant):
    """P13/P9: a write refused by the cap still tags the document with its subject.

    Killed by: test_a_refused_write_does_not_tag_the_document.
    """

    def refused(self, docs: dict[str, _Document], old: _Document | None, request: RetainRequest, body: str) -> None:
        if old is not None and request.data_subject_id:
            docs[request.ref.label] = attrs.evolve(old, data_subjects=old.data_subjects | {request.data_subject_id})


class CapErrorReportsAppendProjection(MemoryProvider):
    """P9: a refused replace reports projected = old + new size (the check itself is right).

    Killed by: test_replace_is_capped_on_the_new_body_alone.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        try:
            return super().memvault_retain(request)
        except CapExceeded as exc:
            if request.mode != "replace" or not exc.current:
                raise
            raise CapExceeded(
                tier=exc.tier, cap=exc.cap, projected=exc.projected + exc.current, current=exc.current
            ) from None


class WarningRoundsToNearest(MemoryProvider):
    """P9: the warning's percentage is rounded to nearest, not down (3399 of 4000 says 85%).

    Killed by: test_warning_reports_the_final_body_after_append.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        result = super().memvault_retain(request)
        if not result.warning:
            return result
        cap = int(result.warning.split(" of ")[1].split()[0])
        head = result.warning.rsplit(", ", 1)[0]
        return attrs.evolve(result, warning=f"{head}, {round(result.bytes * 100 / cap)}%")


class TearsAppendsInTwo(MemoryProvider):
    """P12: an append is written in two halves, releasing the lock in between, so writes interleave mid-way.

    Killed by: test_concurrent_appends_from_threads_lose_nothing.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        if request.mode != "append" or len(request.content) < 2:
            return super().memvault_retain(request)
        half = len(request.content) // 2
        super().memvault_retain(attrs.evolve(request, content=request.content[:half]))
        time.sleep(0.0002)
        return super().memvault_retain(attrs.evolve(request, content=request.content[half:]))


class RetainIdIsAStoragePath(MemoryProvider):
    """P10/P4: retain returns the storage path as the id.

    Killed by: test_retain_id_is_the_tier_label.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        result = super().memvault_retain(request)
        return attrs.evolve(result, id=f"{request.workspace_id}/{result.id}")


class NormalisesLineEndings(_Rewriting):
    """P6/P21: stored bodies have CRLF turned into LF (a text-mode file, a normalising column).

    Killed by: test_unicode_and_whitespace_round_trip_exactly.
    """

    def rewrite(self, request: Any) -> Any:
        if isinstance(request, RetainRequest) and "\r\n" in request.content:
            return attrs.evolve(request, content=request.content.replace("\r\n", "\n"))
        return request


class PeerKeysShareOneDocument(_Rewriting):
    """P7: every peer slug lands in one document.

    Killed by: test_peers_slugs_are_separate_documents.
    """

    def rewrite(self, request: Any) -> Any:
        if isinstance(request, (RetainRequest, ReadRequest)) and request.tier is Tier.PEERS:
            return attrs.evolve(request, key="everyone")
        return request


class LimitOffByOne(_Rewriting):
    """P15: returns one hit fewer than the limit.

    Killed by: test_limit_within_range_is_respected.
    """

    def rank(self, request: RecallRequest, indexes: list[text.IndexedDocument]) -> list[RecallSnippet]:
        return text.search(text.Query.parse(request.query), indexes, request.limit)[: request.limit - 1]


class SearchesOnlyAgentMdWithoutTier(_Rewriting):
    """P16: recall without a tier searches AGENT.md of the agent only (and CREW.md).

    Killed by: test_recall_without_tier_searches_every_agent_tier.
    """

    def scopes(self, request: RecallRequest) -> list[tuple[Partition, tuple[Tier, ...]]]:
        if request.tier is None:
            return [(p, (Tier.AGENT,) if p.kind == "agent" else t) for p, t in request.scopes()]
        return list(request.scopes())


class ForgetLeavesTheBody(MemoryProvider):
    """P23/P21: forget by id drops the document from search but read still returns its body.

    Killed by: test_forgotten_document_reads_empty.
    """

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if not request.id:
            return super().memvault_forget(request)
        with self._lock:
            docs = self._partitions.get(request.ref.partition, {})
            doc = docs.get(request.id)
            if doc is None or not doc.index.line_count:
                return ForgetResult(removed=0)
            docs[request.id] = attrs.evolve(doc, index=text.index_document(request.id, ""))
        return ForgetResult(removed=1)


class ErasureCountsWrites(MemoryProvider):
    """P24: erasure returns the number of the subject's writes, not of documents removed.

    Killed by: test_a_document_carries_every_subject_that_wrote_to_it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._writes: dict[tuple[Partition, str], list[str]] = {}

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        result = super().memvault_retain(request)
        with self._lock:
            self._writes.setdefault((request.ref.partition, request.ref.label), []).append(request.data_subject_id)
        return result

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if request.id:
            with self._lock:
                self._writes.pop((request.ref.partition, request.id), None)
            return super().memvault_forget(request)
        with self._lock:
            writes = sum(
                w.count(request.data_subject_id)
                for (partition, label), w in self._writes.items()
                if partition.workspace_id == request.workspace_id and request.data_subject_id in w
            )
        result = super().memvault_forget(request)
        return ForgetResult(removed=writes if result.removed else 0)


# -- recall input: lines, appends, ordering across documents (P15, P17, P18, P20) ---------


class DropsUnterminatedLastLine(MemoryProvider):
    """P17/P18: only newline-terminated lines are indexed.

    Killed by: test_an_unterminated_last_line_is_searched.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        result = super().memvault_retain(request)
        ref = request.ref
        with self._lock:
            doc = self._partitions[ref.partition][ref.label]
            complete = doc.body[: doc.body.rfind("\n") + 1]
            self._partitions[ref.partition][ref.label] = attrs.evolve(
                doc, index=text.index_document(ref.label, complete)
            )
        return result


class _Chunked(MemoryProvider):
    """Each write is indexed on its own, as a backend storing appends as rows would (base for two mutants)."""

    renumber = False

    def __init__(self) -> None:
        super().__init__()
        self._chunks: dict[tuple[Partition, str], list[str]] = {}

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        result = super().memvault_retain(request)
        with self._lock:
            chunks = self._chunks.setdefault((request.ref.partition, request.ref.label), [])
            if request.mode == "replace":
                chunks.clear()
            chunks.append(request.content)
        return result

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        result = super().memvault_forget(request)
        if request.id:
            with self._lock:
                self._chunks.pop((request.ref.partition, request.ref.label), None)
        return result

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        query = text.Query.parse(request.query)
        hits: list[RecallSnippet] = []
        with self._lock:
            for partition, tiers in request.scopes():
                for label, doc in self._partitions.get(partition, {}).items():
                    if doc.tier not in tiers:
                        continue
                    offset = 0
                    for chunk in self._chunks.get((partition, label), []):
                        for hit in text.search(query, [text.index_document(label, chunk)], 20):
                            hits.append(attrs.evolve(hit, line=hit.line + offset) if self.renumber else hit)
                        offset += chunk.count("\n")
        hits.sort(key=lambda h: -h.score)
        return RecallResult(hits=hits[: request.limit])


class LineNumbersRestartPerAppend(_Chunked):
    """P18/P6: each append is indexed alone and numbered from 1 again.

    Killed by: test_line_numbers_count_across_appends.
    """


class WordsSplitAcrossAppendsAreLost(_Chunked):
    """P17/P6: each append is indexed alone (line numbers right), so "Thurs" + "day" is never "thursday".

    Killed by: test_a_word_split_across_two_appends_is_found, test_line_numbers_count_across_appends.
    """

    renumber = True


class PerDocumentRankingConcatenated(_Rewriting):
    """P15/P17/P18: each document is searched alone and the results are concatenated, then cut to the limit.

    Killed by: test_ranking_and_limit_are_global_across_documents.
    """

    def rank(self, request: RecallRequest, indexes: list[text.IndexedDocument]) -> list[RecallSnippet]:
        query = text.Query.parse(request.query)
        return [hit for index in indexes for hit in text.search(query, [index], request.limit)][: request.limit]


class LimitAppliedPerDocument(_Rewriting):
    """P15: the limit is applied per document; the merged, sorted list can hold more.

    Killed by: test_ranking_and_limit_are_global_across_documents.
    """

    def rank(self, request: RecallRequest, indexes: list[text.IndexedDocument]) -> list[RecallSnippet]:
        query = text.Query.parse(request.query)
        hits = [hit for index in indexes for hit in text.search(query, [index], request.limit)]
        return sorted(hits, key=lambda h: -h.score)


class ReturnsLinesSharingNoTerm(_Rewriting):
    """P17: lines sharing no term with the query come back at a low score.

    Killed by: test_line_sharing_no_term_is_never_returned.
    """

    def rank(self, request: RecallRequest, indexes: list[text.IndexedDocument]) -> list[RecallSnippet]:
        hits = text.search(text.Query.parse(request.query), indexes, request.limit)
        seen = {(h.source, h.line) for h in hits}
        for index in indexes:
            for position in range(index.line_count):
                line = index.line(position)
                if (index.source, line.number) not in seen:
                    hits.append(
                        RecallSnippet(source=index.source, line=line.number, snippet=line.text[:500], score=0.001)
                    )
        return hits[: request.limit]


class ZeroBasedLines(MemoryProvider):
    """P18: line numbers count from 0 (validator bypassed).

    Killed by: test_line_numbers_are_one_based_and_point_at_the_matching_line.
    """

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        result = super().memvault_recall(request)
        for hit in result.hits:
            object.__setattr__(hit, "line", hit.line - 1)
        return result


class IndexLagsOneWrite(MemoryProvider):
    """P20: the search index is refreshed one write late (an asynchronous indexer).

    Killed by: test_recall_sees_a_write_immediately.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        with self._lock:
            old = self._partitions.get(ref.partition, {}).get(ref.label)
        result = super().memvault_retain(request)
        with self._lock:
            doc = self._partitions[ref.partition][ref.label]
            stale = old.index if old else text.index_document(ref.label, "")
            self._partitions[ref.partition][ref.label] = attrs.evolve(doc, index=stale)
        return result


class ReadTruncates(MemoryProvider):
    """P21: read returns at most the first 1000 characters.

    Killed by: test_read_returns_the_full_body_and_label.
    """

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        result = super().memvault_read(request)
        return attrs.evolve(result, content=result.content[:1000])


class StaleHitDigest(MemoryProvider):
    """P18/P19: hits carry the digest of the document's first version, not of the current body.

    Killed by: test_hit_digest_when_given_is_the_sha256_of_the_document_body.
    """

    def __init__(self) -> None:
        super().__init__()
        self._first: dict[tuple[Partition, str], str] = {}

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        result = super().memvault_retain(request)
        with self._lock:
            doc = self._partitions[request.ref.partition][request.ref.label]
            self._first.setdefault(
                (request.ref.partition, request.ref.label), hashlib.sha256(doc.body.encode()).hexdigest()
            )
        return result

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        result = super().memvault_recall(request)
        firsts = {
            label: digest
            for (partition, label), digest in self._first.items()
            if partition.workspace_id == request.workspace_id
        }
        return RecallResult(hits=[attrs.evolve(h, digest=firsts.get(h.source, "")) for h in result.hits])


# -- forget under concurrency (P23, P28) --------------------------------------------------


class ForgetCheckThenDelete(MemoryProvider):
    """P23/P28: forget checks for the document, releases the lock, then deletes: two racing calls both count it.

    Killed by: test_forgetting_one_document_from_two_threads_removes_it_once.
    """

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if not request.id:
            return super().memvault_forget(request)
        with self._lock:
            existed = request.id in self._partitions.get(request.ref.partition, {})
        time.sleep(0.005)
        with self._lock:
            self._partitions.get(request.ref.partition, {}).pop(request.id, None)
        return ForgetResult(removed=int(existed))


# -- data subjects (P13, P24) -------------------------------------------------------------


class _SubjectMutant(MemoryProvider):
    """Retain that computes a document's subjects with ``subjects``; erasure that matches with ``matches``."""

    def subjects(self, old: frozenset[str], new: str) -> frozenset[str]:
        return old | ({new} - {""})

    def matches(self, tags: frozenset[str], subject: str) -> bool:
        return subject in tags

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        with self._lock:
            old = self._partitions.get(ref.partition, {}).get(ref.label)
        result = super().memvault_retain(request)
        with self._lock:
            doc = self._partitions[ref.partition][ref.label]
            tags = self.subjects(old.data_subjects if old else frozenset(), request.data_subject_id)
            self._partitions[ref.partition][ref.label] = attrs.evolve(doc, data_subjects=tags)
        return result

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if request.id:
            return super().memvault_forget(request)
        removed = 0
        with self._lock:
            for partition, docs in self._partitions.items():
                if partition.workspace_id == request.workspace_id:
                    for label in [
                        lb for lb, d in docs.items() if self.matches(d.data_subjects, request.data_subject_id)
                    ]:
                        del docs[label]
                        removed += 1
        return ForgetResult(removed=removed)


class UntaggedWriteClearsSubjects(_SubjectMutant):
    """P13: an untagged write leaves the document untagged.

    Killed by: test_an_untagged_write_never_clears_a_subject.
    """

    def subjects(self, old: frozenset[str], new: str) -> frozenset[str]:
        return frozenset({new} - {""})


class KeepsLatestSubject(_SubjectMutant):
    """P13: a document keeps only the latest subject that wrote to it (one subject column, overwritten).

    Killed by: test_a_document_carries_every_subject_that_wrote_to_it.
    """

    def subjects(self, old: frozenset[str], new: str) -> frozenset[str]:
        return frozenset({new}) if new else old


class KeepsFirstSubject(_SubjectMutant):
    """P13: a document keeps only the first subject that wrote to it.

    Killed by: test_a_document_carries_every_subject_that_wrote_to_it.
    """

    def subjects(self, old: frozenset[str], new: str) -> frozenset[str]:
        return old or frozenset({new} - {""})


class SubjectsMatchCaseInsensitively(_SubjectMutant):
    """P13: erasure compares subject ids case-insensitively (SQL LIKE, a NOCASE collation).

    Killed by: test_subjects_match_exactly.
    """

    def matches(self, tags: frozenset[str], subject: str) -> bool:
        return subject.casefold() in {t.casefold() for t in tags}


class SubjectsMatchByPrefix(_SubjectMutant):
    """P13: erasure matches subject ids by prefix (`LIKE 'user-1%'`).

    Killed by: test_subjects_match_exactly.
    """

    def matches(self, tags: frozenset[str], subject: str) -> bool:
        return any(t.startswith(subject) for t in tags)


class SubjectsMatchInAJoinedList(_SubjectMutant):
    """P13: tags are stored as one comma-joined string and erasure matches by substring (`LIKE '%user-1%'`).

    Killed by: test_subjects_match_exactly.
    """

    def matches(self, tags: frozenset[str], subject: str) -> bool:
        return subject in ",".join(sorted(tags))


class ErasureSparesSharedDocuments(_SubjectMutant):
    """P24: erasure removes only documents the subject wrote alone; shared ones just lose the tag.

    Killed by: test_a_document_carries_every_subject_that_wrote_to_it.
    """

    def matches(self, tags: frozenset[str], subject: str) -> bool:
        return tags == {subject}


class TagsOutliveForget(MemoryProvider):
    """P13/P23: subjects are kept per label in a side table that forget by id does not clear.

    Killed by: test_forget_by_id_clears_the_documents_subjects.
    """

    def __init__(self) -> None:
        super().__init__()
        self._tags: dict[tuple[Partition, str], set[str]] = {}

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        result = super().memvault_retain(request)
        with self._lock:
            tags = self._tags.setdefault((request.ref.partition, request.ref.label), set())
            tags.update({request.data_subject_id} - {""})
            doc = self._partitions[request.ref.partition][request.ref.label]
            self._partitions[request.ref.partition][request.ref.label] = attrs.evolve(
                doc, data_subjects=frozenset(tags)
            )
        return result


class ErasureKeepsQuarantineCopies(MemoryProvider):
    """P24/P30: erasure removes documents but not the quarantine copies of the subject's rejected writes.

    Killed by: test_p24_forget_by_subject_removes_the_subjects_quarantine_copies.
    """

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        with self._lock:
            saved = {ws: dict(copies) for ws, copies in self._quarantine.items()}
        result = super().memvault_forget(request)
        with self._lock:
            self._quarantine = saved
        return result


class ErasureKeepsOthersCopies(MemoryProvider):
    """P24/P30: erasure removes the copies of the subject's own rejected writes only, not those of other
    writers' rejected appends to the subject's documents (which hold the subject's text).

    Killed by: test_p24_erasure_removes_copies_of_rejected_appends_to_the_subjects_documents.
    """

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        with self._lock:
            saved = {
                ws: {d: r for d, r in copies.items() if r.data_subject_id != request.data_subject_id}
                for ws, copies in self._quarantine.items()
            }
        result = super().memvault_forget(request)
        with self._lock:
            for ws, copies in saved.items():
                self._quarantine.setdefault(ws, {}).update(copies)
        return result


# -- the stored body of an append, checked inside the write (P29, P30; capability checks_stored) --------


class _StoredCheckMutant(MemoryProvider):
    """Memory's retain with the scanner's stored-body check moved: ``check(old, digest)`` runs ``when``."""

    when = "before"

    def digest_of(self, ref: Any, old: _Document | None) -> str:
        return old.digest if old else ""

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        ref = request.ref
        with self._lock:
            docs = self._partitions.setdefault(ref.partition, {})
            old = docs.get(ref.label)
            stored, digest = (old.body if old else ""), self.digest_of(ref, old)
            if self.when == "before":
                check_stored(stored, digest)
            final = request.applied_to(stored, old.data_subjects if old else ())
            docs[ref.label] = _final_document(request, final)
            if self.when == "after":
                check_stored(stored, digest)
        return RetainResult(id=ref.label, bytes=final.bytes, warning=final.warning)


class ChecksAfterWriting(_StoredCheckMutant):
    """P30/P33: declares checks_stored but runs the scanner's check after writing, so a rejected append is stored.

    Killed by: test_p30_a_rejected_append_leaves_no_trace,
    test_p29_an_injection_split_across_the_append_boundary_is_rejected.
    """

    when = "after"


class NeverChecksStored(_StoredCheckMutant):
    """P29/P33: declares checks_stored but never calls check_stored: appends are stored unscanned.

    Killed by: test_p29_an_injection_split_across_the_append_boundary_is_rejected.
    """

    when = "never"


class ChecksAStaleDigest(_StoredCheckMutant):
    """P29/P33: hands the scanner the digest of the document's first body (a digest column never updated), so a
    clean verdict of an earlier body stands for the body the append really extends.

    Killed by: test_p29_an_append_to_a_body_the_scanner_never_judged_scans_all_of_it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._first: dict[Any, str] = {}

    def digest_of(self, ref: Any, old: _Document | None) -> str:
        if old is None:
            return ""
        return self._first.setdefault((ref.partition, ref.label), old.digest)


# -- health (P25, P27, P28) ---------------------------------------------------------------


class HealthFailsWhileBusy(MemoryProvider):
    """P25/P28: health reports ok=False whenever another call holds the store lock.

    Killed by: test_health_is_ok_while_other_calls_run.
    """

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        if not self._lock.acquire(blocking=False):
            return HealthStatus(ok=False, message="store is busy")
        self._lock.release()
        return HealthStatus(ok=True)


class HealthBuiltAtStartUp(MemoryProvider):
    """P25: health returns the status it built when the provider started.

    Killed by: test_health_checked_at_is_taken_at_each_call.
    """

    def __init__(self) -> None:
        super().__init__()
        self._status = HealthStatus(ok=True)

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        return self._status


class HealthCachedForASecond(MemoryProvider):
    """P25: health re-probes at most once a second and returns the cached status in between.

    Killed by: test_health_checked_at_is_taken_at_each_call.
    """

    def __init__(self) -> None:
        super().__init__()
        self._cached: tuple[float, HealthStatus] | None = None

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        now = time.monotonic()
        if self._cached is None or now - self._cached[0] > 1.0:
            self._cached = (now, HealthStatus(ok=True))
        return self._cached[1]


class HealthProbeLeavesADocument(MemoryProvider):
    """P27: the probe exercises the real write path in the last partition written and never removes its document.

    Killed by: test_health_probe_leaves_nothing_behind.
    """

    def __init__(self) -> None:
        super().__init__()
        self._last: RetainRequest | None = None

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        self._last = request
        return super().memvault_retain(request)

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        if self._last is not None:
            probe = attrs.evolve(
                self._last, tier="pins", key="", content="health probe check test ok\n", mode="replace"
            )
            super().memvault_retain(probe)
        return HealthStatus(ok=True)


class HealthFlapsWhileCallsAreInFlight(MemoryProvider):
    """P25/P28: health reports ok=False whenever any verb call is in flight: it flaps under ordinary load.

    Killed by: test_health_stays_ok_under_ordinary_load_sampled_many_times, test_health_is_ok_while_other_calls_run.
    """

    def __init__(self) -> None:
        super().__init__()
        self._in_flight = 0
        self._counting = threading.Lock()

    @contextmanager
    def _call(self) -> Iterator[None]:
        with self._counting:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._counting:
                self._in_flight -= 1

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        with self._call():
            return super().memvault_retain(request)

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        with self._call():
            return super().memvault_recall(request)

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        with self._call():
            return super().memvault_read(request)

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        with self._call():
            return super().memvault_forget(request)

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        if self._in_flight:
            return HealthStatus(ok=False, message=f"{self._in_flight} calls in flight")
        return HealthStatus(ok=True)


class HealthProbeRacesItself(MemoryProvider):
    """P25/P28: the probe writes a token to one shared slot and reads it back: two probes at once overwrite
    each other's token, and the loser reports the store broken.

    Killed by: test_concurrent_health_checks_each_say_ok.
    """

    def __init__(self) -> None:
        super().__init__()
        self._probe_slot = ""

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        token = hashlib.sha256(str(time.perf_counter_ns()).encode()).hexdigest()
        self._probe_slot = token
        time.sleep(0.002)  # the round trip to storage
        if self._probe_slot != token:
            return HealthStatus(ok=False, message="probe read back another value: storage is corrupt")
        return HealthStatus(ok=True)


# -- write groups (P34): memory as a transactional backend with memvault_write_group ---------------

_Store = dict[Any, dict[str, Any]]


def _copied(store: _Store) -> _Store:
    return {k: dict(v) for k, v in store.items()}


def _staged(name: str) -> Any:
    """A store attribute that is the calling thread's group's staged copy inside a group, else ``_live_<name>``."""

    def get(self: Any) -> _Store:
        state = self._state()
        store: _Store = getattr(state, name) if state is not None else getattr(self, f"_live_{name}")
        return store

    def put(self: Any, value: _Store) -> None:
        state = self._state()
        if state is not None:
            setattr(state, name, value)
        else:
            setattr(self, f"_live_{name}", value)

    return property(get, put)


class _GroupState:
    """One open write group: the staged copy of the store its thread's retains write to, and what they did."""

    def __init__(self, partitions: _Store, quarantine: _Store) -> None:
        self.partitions = partitions
        self.quarantine = quarantine
        #: the store as the group found it (its transaction's start)
        self.base = (_copied(partitions), _copied(quarantine))
        #: the retains that succeeded, in order; the staged store after the first of them
        self.writes: list[RetainRequest] = []
        self.first: tuple[_Store, _Store] | None = None
        #: (partition, label, subject) of every tagged retain tried in the group
        self.tags: list[tuple[Partition, str, str]] = []
        #: the partition each label was first written to in the group
        self.labels: dict[str, Partition] = {}


class _Grouped(MemoryProvider):
    """Memory as a transactional backend with a write group (P34): the base of the group mutants.

    A retain is one transaction, written the way a SQL backend writes it: the document's row first (and its
    subject's tag), then the scanner's check of the stored body and the cap check, then the body; a retain that
    raises is rolled back (restored from a copy of the store taken before it). A write group holds the writer
    lock from entry to exit; its thread's retains (and reads, and quarantine copies) work on a staged copy of
    the store, each retain under its own savepoint, and a clean exit publishes the copy: the commit. Unmutated
    it keeps the contract (the control ``control-write-group``); each mutant below changes one step.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._writer = threading.RLock()  # every write and every group, from entry to exit
        self._live_partitions: _Store = {}
        self._live_quarantine: _Store = {}
        super().__init__()

    def _forked(self) -> None:
        super()._forked()
        self._writer = threading.RLock()  # in a forked child (P35): not one a lost thread holds

    # The store the calling thread sees: its group's staged copy inside a group, else the live one.

    _partitions = _staged("partitions")
    _quarantine = _staged("quarantine")

    def _state(self) -> _GroupState | None:
        local = self.__dict__.get("_local")
        return getattr(local, "state", None) if local is not None else None

    # -- the group ------------------------------------------------------------------

    @hookimpl
    def memvault_write_group(self) -> AbstractContextManager[None]:
        return self._group()

    def group_lock(self) -> AbstractContextManager[Any]:
        """What the group holds from entry to exit (the writer lock: no other thread writes meanwhile)."""
        return self._writer

    @contextmanager
    def _group(self) -> Iterator[None]:
        with self.group_lock():
            if self._state() is not None:  # re-entered on the same thread: joins the open group
                yield
                return
            with self._lock:
                state = _GroupState(_copied(self._live_partitions), _copied(self._live_quarantine))
            self._local.state = state
            try:
                yield
                self.commit(state)
            finally:
                self._local.state = None

    def commit(self, state: _GroupState) -> None:
        """Publish the staged store."""
        with self._lock:
            self._live_partitions, self._live_quarantine = state.partitions, state.quarantine

    # -- one retain ---------------------------------------------------------------------

    def partition_of(self, request: RetainRequest, state: _GroupState | None) -> Partition:
        return request.ref.partition

    def write(self, request: RetainRequest, state: _GroupState | None) -> RetainResult:
        """The retain's statements, in a SQL backend's order; under the store lock, in a transaction."""
        ref = request.ref
        docs = self._partitions.setdefault(self.partition_of(request, state), {})
        old = docs.get(ref.label)
        stored, digest = (old.body, old.digest) if old is not None else ("", "")
        if old is None:  # get-or-create the document's row
            old = docs[ref.label] = _doc(request.tier, ref.label, "")
        if request.data_subject_id:  # tag it
            old = docs[ref.label] = attrs.evolve(old, data_subjects=old.data_subjects | {request.data_subject_id})
        check_stored(stored, digest)
        final = request.applied_to(stored, old.data_subjects)
        docs[ref.label] = _final_document(request, final)
        return RetainResult(id=ref.label, bytes=final.bytes, warning=final.warning)

    def failed(self, mark: tuple[_Store, _Store], state: _GroupState | None) -> None:
        """Roll a retain that raised back: to its savepoint inside a group, else its whole transaction."""
        self._partitions, self._quarantine = mark

    def written(self, request: RetainRequest, state: _GroupState) -> None:
        """A retain of the group succeeded (its savepoint released)."""

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        with self._writer:
            state = self._state()
            if state is not None and request.data_subject_id:
                state.tags.append((request.ref.partition, request.ref.label, request.data_subject_id))
            with self._lock:
                mark = (_copied(self._partitions), _copied(self._quarantine))
                try:
                    result = self.write(request, state)
                except BaseException:
                    self.failed(mark, state)
                    raise
            if state is not None:
                self.written(request, state)
            return result

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        with self._writer:
            return super().memvault_forget(request)

    @hookimpl
    def memvault_quarantine_keep(self, record: QuarantineRecord) -> bool:
        with self._writer:
            return super().memvault_quarantine_keep(record)


class GroupKeepsAFailedItemsWrites(_Grouped):
    """P34/P9/P13: the group has no savepoint per retain, so a retain that fails inside it (over its cap, or
    rejected by the scanner's check in the write) keeps what it wrote before failing, the document's new row
    and its subject's tag, and the group's commit stores them.

    Killed by: test_retain_many_a_failed_item_creates_no_document, test_retain_many_tags_only_the_items_it_stores,
    test_p34_an_item_the_scanner_rejects_fails_alone.
    """

    def failed(self, mark: tuple[_Store, _Store], state: _GroupState | None) -> None:
        if state is None:
            super().failed(mark, state)


class GroupRollsBackEverythingOnAnItemError(_Grouped):
    """P34: a retain that fails inside the group rolls back the group's whole transaction (ROLLBACK where
    ROLLBACK TO its savepoint was meant), so the successes before it, already answered, are lost.

    Killed by: test_retain_many_gives_one_outcome_per_item_in_order, test_retain_many_a_failed_item_creates_no_document.
    """

    def failed(self, mark: tuple[_Store, _Store], state: _GroupState | None) -> None:
        if state is None:
            super().failed(mark, state)
        else:
            self._partitions, self._quarantine = _copied(state.base[0]), _copied(state.base[1])


class GroupNeverCommits(_Grouped):
    """P34: the group's exit forgets to commit (the pooled connection rolls the transaction back when it is next
    used), so every retain of a retain_many is answered and none is stored.

    Killed by: test_retain_many_gives_one_outcome_per_item_in_order,
    test_retain_many_stores_every_item_of_a_long_list_in_order.
    """

    def commit(self, state: _GroupState) -> None:
        pass


class GroupCommitsOnlyTheFirstWrite(_Grouped):
    """P34: the group's commit ends the transaction its first retain began; the later ones ran after it in a
    transaction nobody commits, and are lost.

    Killed by: test_retain_many_gives_one_outcome_per_item_in_order,
    test_retain_many_stores_every_item_of_a_long_list_in_order.
    """

    def written(self, request: RetainRequest, state: _GroupState) -> None:
        if state.first is None:
            state.first = (_copied(state.partitions), _copied(state.quarantine))

    def commit(self, state: _GroupState) -> None:
        if state.first is not None:
            state.partitions, state.quarantine = state.first
        super().commit(state)


class GroupReordersWrites(_Grouped):
    """P34: the group buffers its writes and flushes them as a stack at exit, last first: each retain was
    answered as if in order, but a document's appends are stored reversed.

    Killed by: test_retain_many_gives_one_outcome_per_item_in_order,
    test_retain_many_stores_every_item_of_a_long_list_in_order.
    """

    def written(self, request: RetainRequest, state: _GroupState) -> None:
        state.writes.append(request)

    def commit(self, state: _GroupState) -> None:
        state.partitions = _copied(state.base[0])
        for request in reversed(state.writes):
            mark = (_copied(state.partitions), _copied(state.quarantine))
            with self._lock:
                try:
                    self.write(request, state)
                except MemvaultError:
                    self.failed(mark, state)
        super().commit(state)


class GroupSwallowsItemErrors(_Grouped):
    """P34/P9: inside a group a retain over its cap is rolled back but answered as a success (the backend
    defers constraint errors to the commit, then drops the failing rows without telling anyone).

    Killed by: test_retain_many_gives_one_outcome_per_item_in_order, test_retain_many_outcomes_equal_single_retains.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        try:
            return super().memvault_retain(request)
        except CapExceeded as exc:
            if self._state() is None:
                raise
            return RetainResult(id=request.ref.label, bytes=exc.projected, warning="")


class GroupCachesDocumentsByLabel(_Grouped):
    """P34/P3: the group caches the documents it has written by label alone, so a later retain of the same
    label for another agent or workspace in the same group lands in the first one's document.

    Killed by: test_retain_many_never_crosses_partitions.
    """

    def partition_of(self, request: RetainRequest, state: _GroupState | None) -> Partition:
        if state is None:
            return request.ref.partition
        return state.labels.setdefault(request.ref.label, request.ref.partition)


class GroupTagsAtCommit(_Grouped):
    """P34/P13: the group collects every retain's subject and inserts the tags in one statement at commit,
    also those of retains that failed and were rolled back.

    Killed by: test_retain_many_tags_only_the_items_it_stores, test_p34_an_item_the_scanner_rejects_fails_alone.
    """

    def commit(self, state: _GroupState) -> None:
        for partition, label, subject in state.tags:
            doc = state.partitions.get(partition, {}).get(label)
            if doc is not None:
                state.partitions[partition][label] = attrs.evolve(doc, data_subjects=doc.data_subjects | {subject})
        super().commit(state)


class GroupHidesItsWritesFromReads(_Grouped):
    """P34/P29: reads made inside the group use another connection, which cannot see the group's uncommitted
    writes, so the scanner reading an append's stored body back judges the body before the group's earlier
    appends: an injection they complete is stored.

    Killed by: test_p34_an_injection_split_across_two_items_is_rejected,
    test_p34_an_item_the_scanner_rejects_fails_alone.
    """

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        if self._state() is None:
            return super().memvault_read(request)
        ref = request.ref
        with self._lock:
            doc = self._live_partitions.get(ref.partition, {}).get(ref.label)
        return ReadResult(id=ref.label, content=doc.body if doc else "")


class GroupDropsQuarantineCopies(_Grouped):
    """P34/P30: inside a group, the quarantine copy of a rejected retain is staged in a list the commit never
    writes out, though it answered that the copy was kept.

    Killed by: test_p34_an_item_the_scanner_rejects_fails_alone.
    """

    @hookimpl
    def memvault_quarantine_keep(self, record: QuarantineRecord) -> bool:
        if self._state() is not None:
            return True
        return super().memvault_quarantine_keep(record)


class GroupPublishesAStaleCopy(_Grouped):
    """P34/P12: the group does not hold the writer lock: it copies the store at entry and publishes its copy at
    exit, so what other threads wrote meanwhile is lost.

    Killed by: test_retain_many_and_concurrent_retains_lose_nothing.
    """

    def group_lock(self) -> AbstractContextManager[Any]:
        return nullcontext()


# -- the plain memory provider claiming what it cannot keep (P11, P20) ----------------------


class ClaimsDurableAndMultiProcess(MemoryProvider):
    """P11/P20: declares durable and multi_process, but its writes die with the process.

    Killed by: test_acknowledged_writes_survive_kill_9, test_writes_survive_closing_and_reopening,
    test_write_in_another_process_is_visible_here.
    """


# -- fairness controls: legitimate differences the suite must accept ---------------------


class OwnRankingEngine(_Rewriting):
    """Control (must pass): a provider with its own engine: different scores (squared), ties broken the other
    way, whole lines as snippets. Order by score, phrase above term-only lines and range all still hold."""

    def rank(self, request: RecallRequest, indexes: list[text.IndexedDocument]) -> list[RecallSnippet]:
        hits = text.search(text.Query.parse(request.query), indexes, 10_000)
        texts = {(i.source, i.line(p).number): i.line(p).text for i in indexes for p in range(i.line_count)}
        rescored = [
            RecallSnippet(
                source=h.source,
                line=h.line,
                snippet=texts[(h.source, h.line)][:500] if len(texts[(h.source, h.line)]) <= 500 else h.snippet,
                score=round(h.score**2, 6),
            )
            for h in hits
        ]
        rescored.sort(key=lambda h: (-h.score, h.source, -h.line), reverse=False)
        return rescored[: request.limit]


class NoCascadeUnnamed(MemoryProvider):
    """Control (must pass): no cascade_forget, and its NotSupported does not name the provider: the Vault does."""

    capabilities = frozenset()

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if request.data_subject_id:
            raise NotSupported("forget by data_subject_id is not supported: forget each document by id")
        return super().memvault_forget(request)


class _VectorMutant(MemoryProvider):
    """Vectors keyed by document and line number alone, as a provider that never checks which text a
    vector was computed from would keep them; what each mutant then forgets to drop differs."""

    drop_on_replace = True
    drop_on_forget = True
    search_globally = False

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        if self.drop_on_replace:
            return super().memvault_retain(request)
        with self._lock:
            kept = {key: dict(lines) for key, lines in self._vectors.items()}
        result = super().memvault_retain(request)
        with self._lock:
            for key, lines in kept.items():
                self._vectors.setdefault(key, {}).update(lines)
        return result

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        if self.drop_on_forget:
            return super().memvault_forget(request)
        with self._lock:
            kept = {key: dict(lines) for key, lines in self._vectors.items()}
        result = super().memvault_forget(request)
        with self._lock:
            self._vectors.update(kept)
        return result

    def _blind(self, model_id: str) -> None:
        # Every kept vector is taken for its line's current text (the digest check is what is missing).
        with self._lock:
            for (partition, label), lines in self._vectors.items():
                doc = self._partitions.get(partition, {}).get(label)
                if doc is None:
                    continue
                for line in doc.index.lines:
                    have = lines.get(line.number)
                    if have is not None:
                        lines[line.number] = (line_digest(line.text), have[1], have[2])

    @hookimpl
    def memvault_vectors_pending(self, model_id: str, limit: int) -> list[PendingLine]:
        self._blind(model_id)
        return super().memvault_vectors_pending(model_id, limit)

    @hookimpl
    def memvault_vectors_backlog(self, model_id: str) -> int:
        self._blind(model_id)
        return super().memvault_vectors_backlog(model_id)

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        if request.vector is not None:
            self._blind(request.vector.model_id)
        if not self.search_globally or request.vector is None:
            return super().memvault_recall(request)
        # The nearest lines of the whole store first, then only those of the caller's partitions kept.
        query, vector = text.Query.parse(request.query), request.vector
        wanted = dict(request.scopes())
        with self._lock:
            everything = [
                (partition, label, doc, self._vectors.get((partition, label), {}))
                for partition, docs in self._partitions.items()
                for label, doc in docs.items()
            ]
        refs, blobs, owners = [], [], []
        for partition, label, doc, lines in everything:
            for number, (_, model_id, blob) in lines.items():
                if model_id == vector.model_id:
                    refs.append((label, number))
                    blobs.append(blob)
                    owners.append((partition, doc))
        cosines = text.similarities(vector, refs, vectors_from_bytes(blobs, vector.dimensions))
        mine = [
            (partition, label, doc)
            for partition, tiers in wanted.items()
            for label, doc in self._partitions.get(partition, {}).items()
            if doc.tier in tiers
        ]
        labels = {label for _, label, _ in mine}
        similar = {ref: c for ref, c in cosines.items() if ref[0] in labels and _owned(ref, refs, owners, wanted)}
        digests = {doc.index.source: doc.digest for _, _, doc in mine}
        lexical = text.with_digests(text.search(query, [d.index for _, _, d in mine], text.FUSION_DEPTH), digests)

        def texts(wanted_lines: Any) -> dict[tuple[str, int], tuple[str, str]]:
            out = {}
            for label, number in wanted_lines:
                doc = next(d for _, lb, d in mine if lb == label)
                line = next(ln for ln in doc.index.lines if ln.number == number)
                out[(label, number)] = (line.text, doc.digest)
            return out

        return RecallResult(hits=text.fuse(query, lexical, similar, texts, request.limit))


def _owned(ref: tuple[str, int], refs: list[Any], owners: list[Any], wanted: dict[Any, Any]) -> bool:
    return any(r == ref and owners[i][0] in wanted for i, r in enumerate(refs))


class VectorsSearchedGlobally(_VectorMutant):
    """P38: the nearest lines of the whole store are found first and the caller's kept afterwards.

    Killed by: test_p38_a_vector_search_never_crosses_partitions.
    """

    search_globally = True


class VectorsKeptAfterReplace(_VectorMutant):
    """P37: a replace keeps the old lines' vectors, which then answer for the new text.

    Killed by: test_p37_a_replaced_line_leaves_no_stale_vector.
    """

    drop_on_replace = False


class VectorsKeptAfterForget(_VectorMutant):
    """P40: forget removes the document but not its vectors, kept by label and line number, so a new
    document at the label inherits them (its retain keeps what the store holds for the label).

    Killed by: test_p40_forget_by_id_removes_the_vectors.
    """

    drop_on_forget = False
    drop_on_replace = False


# -- memory over time (P43-P44) ------------------------------------------------------------


class SweepOnlyHides(MemoryProvider):
    """P43: expired documents are hidden from every verb but the sweep never removes them (their text stays
    in the store for ever: mem0's expiration_date, which only hides).

    Killed by: test_p43_the_sweep_removes_expired_documents_and_their_text.
    """

    @hookimpl
    def memvault_sweep_expired(self, request: SweepRequest) -> SweepResult:
        return SweepResult()


class SweepLeavesDerivedData(MemoryProvider):
    """P43: the sweep removes the expired document but not what derives from it: its vectors (kept by label
    and line) and the quarantine copies of rejected writes to it.

    Killed by: test_p43_the_sweep_removes_the_documents_vectors,
    test_p43_quarantine_copies_expire_and_go_with_their_document.
    """

    @hookimpl
    def memvault_sweep_expired(self, request: SweepRequest) -> SweepResult:
        with self._lock:
            gone = [
                (partition, label)
                for partition, docs in self._partitions.items()
                for label, doc in docs.items()
                if not doc.live(request.now)
            ]
            for partition, label in gone:
                del self._partitions[partition][label]
        return SweepResult(more=False)


class IgnoresIdempotencyKeys(MemoryProvider):
    """P44: the key is dropped, so a retried append is stored twice.

    Killed by: test_p44_a_repeat_returns_the_first_result_and_writes_nothing,
    test_p44_retain_many_applies_the_rules_per_item.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        return super().memvault_retain(attrs.evolve(request, idempotency_key=""))


class KeyAnswersAnotherWrite(MemoryProvider):
    """P44: a used key returns its recorded result whatever the request, so a different write under it is
    silently lost instead of refused as a conflict.

    Killed by: test_p44_the_same_key_for_another_write_is_a_conflict.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        with self._lock:
            recorded = self._keys.get((request.workspace_id, request.idempotency_key))
        if request.idempotency_key and recorded is not None:
            return recorded.result
        return super().memvault_retain(request)


class KeyRecordedOutsideTheWrite(MemoryProvider):
    """P44: the key is looked up, then the write made, then the key recorded, each under its own lock:
    two first uses at once both miss the key and both write.

    Killed by: test_p44_concurrent_first_uses_of_a_key_write_once.
    """

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        if not request.idempotency_key:
            return super().memvault_retain(request)
        key = (request.workspace_id, request.idempotency_key)
        with self._lock:
            recorded = self._keys.get(key)
        if recorded is not None:
            return recorded.result
        time.sleep(0.05)  # the window between the look-up and the write
        result = super().memvault_retain(attrs.evolve(request, idempotency_key=""))
        with self._lock:
            self._keys[key] = _Key(fingerprint=request.fingerprint(), result=result, recorded_at=clock.now())
        return result


@attrs.frozen
class Mutant:
    """One deliberately broken provider and how the suite is aimed at it."""

    factory: type[Any]
    capabilities: frozenset[str] = MemoryProvider.capabilities
    #: a fairness control: a legitimate provider the suite must pass, on ``control_selection``
    control_selection: str = ""

    @property
    def doc(self) -> str:
        return inspect.getdoc(self.factory) or ""

    @property
    def killers(self) -> list[str]:
        """The suite tests the docstring names after "Killed by:" (the mutant must fail one of them)."""
        found = re.search(r"Killed by:\s*(.*?)\.\s*$", self.doc, re.S)
        return re.findall(r"test_\w+", found.group(1)) if found else []

    @property
    def lines(self) -> list[str]:
        """The contract lines the mutant breaks, from the docstring's "P3/P23:" lead."""
        lead = re.match(r"((?:P\d+/?)+):", self.doc)
        return lead.group(1).split("/") if lead else []

    @property
    def selection(self) -> str:
        """The pytest -k expression the mutant runs under."""
        return self.control_selection or " or ".join(self.killers)


def _name(cls: type) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", cls.__name__).lower()


_CLASSES: list[type[Any]] = [
    HealthFlapsWhileCallsAreInFlight,
    HealthProbeRacesItself,
    ErasureKeepsOthersCopies,
    LeaksAcrossWorkspaces,
    LeaksAcrossAgents,
    IgnoresLimit,
    ForgetAlwaysRemovesOne,
    ForgetRaisesWhenMissing,
    AbsolutePathSources,
    ScoresAboveOne,
    UnsortedHits,
    PhraseNotRankedFirst,
    ReadOfMissingRaises,
    CascadeCrossesWorkspaces,
    LosesConcurrentAppends,
    AppendAddsNewline,
    IgnoresCaps,
    WritesBeforeCapCheck,
    NoCapWarning,
    StaleIndexAfterForget,
    CaseSensitiveMatching,
    SnippetMissesTheMatch,
    UnhealthyMessageWhenOk,
    SlowHealth,
    CrashesUnderThreads,
    CaseInsensitiveIds,
    CaseInsensitiveLabels,
    *(_joined(sep) for sep in (":", "@", ".", "-")),
    PrefixScanRecall,
    PrefixForget,
    PrefixErasure,
    *(_shared_per_workspace(t) for t in (Tier.AGENT, Tier.PERSONA, Tier.PINS, Tier.DAILY, Tier.PEERS)),
    AgentTierFiledUnderCrew,
    NamedTierAddsCrew,
    NamedTierIgnoredWithBothIds,
    CrewNeverSearched,
    ForgetByLabelAcrossAgents,
    DailyDatesShareOneDocument,
    ReplaceAppends,
    BytesCountsCharacters,
    ReplaceProjectedAsAppend,
    IndexedBeforeCapCheck,
    RefusedWriteCreatesDocument,
    RefusedWriteTags,
    CapErrorReportsAppendProjection,
    WarningRoundsToNearest,
    DropsUnterminatedLastLine,
    LineNumbersRestartPerAppend,
    WordsSplitAcrossAppendsAreLost,
    PerDocumentRankingConcatenated,
    LimitAppliedPerDocument,
    ReturnsLinesSharingNoTerm,
    ZeroBasedLines,
    IndexLagsOneWrite,
    ReadTruncates,
    ForgetCheckThenDelete,
    UntaggedWriteClearsSubjects,
    KeepsLatestSubject,
    KeepsFirstSubject,
    SubjectsMatchCaseInsensitively,
    SubjectsMatchByPrefix,
    SubjectsMatchInAJoinedList,
    ErasureSparesSharedDocuments,
    TagsOutliveForget,
    ErasureKeepsQuarantineCopies,
    ChecksAfterWriting,
    NeverChecksStored,
    ChecksAStaleDigest,
    HealthFailsWhileBusy,
    HealthBuiltAtStartUp,
    HealthCachedForASecond,
    StaleHitDigest,
    HealthProbeLeavesADocument,
    TearsAppendsInTwo,
    RetainIdIsAStoragePath,
    NormalisesLineEndings,
    PeerKeysShareOneDocument,
    LimitOffByOne,
    SearchesOnlyAgentMdWithoutTier,
    ForgetLeavesTheBody,
    ErasureCountsWrites,
    GroupKeepsAFailedItemsWrites,
    GroupRollsBackEverythingOnAnItemError,
    GroupNeverCommits,
    GroupCommitsOnlyTheFirstWrite,
    GroupReordersWrites,
    GroupSwallowsItemErrors,
    GroupCachesDocumentsByLabel,
    GroupTagsAtCommit,
    GroupHidesItsWritesFromReads,
    GroupDropsQuarantineCopies,
    GroupPublishesAStaleCopy,
    LockLostAtFork,
    VectorsSearchedGlobally,
    VectorsKeptAfterReplace,
    VectorsKeptAfterForget,
    SweepOnlyHides,
    SweepLeavesDerivedData,
    IgnoresIdempotencyKeys,
    KeyAnswersAnotherWrite,
    KeyRecordedOutsideTheWrite,
]

_RECALL_TESTS = (
    "recall or phrase or hits or question or limit or snippet or score or matching or line or across or twenty"
)

MUTANTS: dict[str, Mutant] = {_name(cls): Mutant(cls) for cls in _CLASSES}
MUTANTS["cascade-silently-unsupported"] = Mutant(CascadeSilentlyUnsupported, frozenset())
MUTANTS["claims-durable-and-multi-process"] = Mutant(
    ClaimsDurableAndMultiProcess,
    MemoryProvider.capabilities | {Capability.DURABLE, Capability.MULTI_PROCESS},
)

#: The write-group base rewrites retain the way a SQL backend writes it, without expiries or idempotency keys: it
#: and its mutants do not declare those (both are optional), so the suite's P41-P45 tests skip for them.
_TIMELESS = MemoryProvider.capabilities - {Capability.EXPIRY, Capability.IDEMPOTENT_WRITES}
for _key, _mutant in list(MUTANTS.items()):
    if issubclass(_mutant.factory, _Grouped):
        MUTANTS[_key] = attrs.evolve(_mutant, capabilities=_TIMELESS)

#: Legitimate providers: each must pass its selection (the control-unmutated one: every mutant's).
CONTROLS: dict[str, Mutant] = {
    "control-unmutated": Mutant(MemoryProvider, control_selection="*"),
    # Another ranking engine keeps no vectors: it does not declare them (recall by meaning is optional).
    "control-own-ranking-engine": Mutant(
        OwnRankingEngine, MemoryProvider.capabilities - {Capability.VECTORS}, control_selection=_RECALL_TESTS
    ),
    "control-no-cascade-unnamed": Mutant(NoCascadeUnnamed, frozenset(), control_selection="by_subject"),
    "control-write-group": Mutant(_Grouped, _TIMELESS, control_selection="*"),
}
