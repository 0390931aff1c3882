"""Layer 5, the built-in prompt-injection scanner (contract P29-P31): a plugin on hook wrappers.

:class:`BuiltinScanner` wraps three provider verbs with ``@hookimpl(wrapper=True)``:

* ``memvault_retain`` scans the *final* body (the stored body plus the new
  content for ``append``) before the provider writes anything. A verdict that
  rejects raises :class:`~memvault.errors.ContentRejected` and asks the provider
  to keep a quarantine copy (``memvault_quarantine_keep``); the live document is
  unchanged. When the writer declared what the model will read once the write
  lands (:func:`memvault.contract.scanning.rendered_view`: a notes slot's
  rendered notebook), that text is judged too, and rejected the same way. For
  an ``append`` on a provider that declares ``checks_stored``,
  the scan runs inside the provider's write, on the very body it extends
  (:func:`memvault.contract.scanning.check_stored`); on any other provider the
  scanner reads the stored body back first.
* ``memvault_recall`` drops every hit whose document fails the scan and lists
  that document's label in ``RecallResult.quarantined``. Then it judges the
  hits together, as the model reads them
  (:func:`memvault.contract.scanning.recalled_text`): when they fail together
  (an injection split across documents that this recall reassembles), the
  documents whose hits make up the match are withheld the same way, and a
  WARNING on the ``memvault.scanner`` logger names them, the category and the
  rule. Nothing is written, so no quarantine copy is kept: the documents stay
  as they are, and each stays readable alone.
* ``memvault_read`` returns a ``[BLOCKED: ...]`` placeholder and the quarantine
  metadata instead of a document that fails the scan.

Verdicts are cached by the body's sha256 in a bounded LRU, so recall does not
rescan unchanged documents.

When the vault has an embedder (and ``[scan] semantic`` is not ``false``), the
builtin scan is a cascade: the rules first, then, for a text they do not
reject, the check by meaning (:mod:`memvault.scanner.semantic`) on the windows
the cascade lets through; its hits add to the rules' evidence (:func:`decide`).
Every verb's verdict goes through it, so a write, a read and a recall judge a
text the same way.

The detection engine is :mod:`memvault.scanner.engine`; the quarantine
placeholder and operator access are in :mod:`memvault.scanner.quarantine`.

May import: :mod:`memvault.contract`, :mod:`memvault.hooks` and the other
modules of :mod:`memvault.scanner`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from memvault.contract.embedding import Embedder
from memvault.contract.errors import ContentRejected, InvalidRequest, PluginError, UpstreamError
from memvault.contract.forking import after_fork_in_child
from memvault.contract.models import (
    CAPS,
    MAX_RECALL_LIMIT,
    Capability,
    Mode,
    Quarantine,
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
    parse_label,
)
from memvault.contract.registration import RegisterScanner
from memvault.contract.scanning import RenderedView, current_rendered_view, recalled_text, stored_check
from memvault.hooks.markers import hookimpl
from memvault.scanner.engine import (
    DEFAULT_POLICY,
    PATTERN_IDS,
    Finding,
    Hit,
    ScanPolicy,
    decide,
    scan,
    scan_hits,
    tail_start,
)
from memvault.scanner.quarantine import blocked_placeholder
from memvault.scanner.review import Draft, Review, Reviewer, ReviewPolicy, review_hit, reviewing_for

__all__ = ["CACHE_SIZE", "JOINT_CACHE_SIZE", "BuiltinScanner", "builtin_scanner"]

if TYPE_CHECKING:
    from memvault.scanner.semantic import SemanticCheck

#: How many verdicts one scanner keeps (by body sha256).
CACHE_SIZE: Final = 4096
#: How many verdicts on recalls' hits read together one scanner keeps (by the text's sha256), apart from
#: the documents' verdicts: most recalls ask something new, and their texts must not push out the
#: verdicts on documents, which every recall reuses.
JOINT_CACHE_SIZE: Final = 512
#: How many sha256 states of appended bodies one scanner keeps, so the next append hashes only its content.
STATES_SIZE: Final = 1024
#: The shortest body whose sha256 state is kept: keeping (copying, freeing) a state costs about what
#: hashing 1-2 KB does, so shorter bodies are hashed again instead.
STATE_MIN_CHARS: Final = 4096
DEFAULT_REVIEW: Final = ReviewPolicy()
_UNKNOWN: Final = Finding(category="", pattern="", form="", excerpt="")

log = logging.getLogger("memvault.scanner")


def _new_lock(scanner: Any) -> None:
    """In a forked child (P35): the verdict cache's lock, not one a thread the child lost holds."""
    scanner._lock = threading.Lock()


class BuiltinScanner:
    """Wraps retain, recall and read; rejects and quarantines injection shapes (P29-P31).

    The vault calls :meth:`bind_vault` once the scanner is registered, which is how
    the wrappers reach the provider's own ``read``/``recall`` (to get the stored
    body of an append, or the documents behind recall hits) and the quarantine store.

    :param detect: the scan function (default: :func:`scan`); a custom one gets the
        whole final body of an append, not only its tail.
    :param cache_size: how many verdicts to keep, by body sha256.
    :param policy: thresholds and allow-listed rules for :func:`scan` (ignored with a
        custom ``scanner``, which applies its own).
    :param embedder: the embedder of the check by meaning (default: the vault's, see
        :meth:`bind_vault`); only for the builtin ``detect``, and only when ``policy.semantic``.
    :param classifiers: third-party evidence for the builtin ``detect``: each is called with the text
        and returns :class:`~memvault.scanner.engine.Hit` objects, which add up with the rules' hits
        (and the check by meaning's) per category before the verdict
        (docs/plugin-authors/scanner-classifier.md).
    :param reviewer: a second reader for the builtin ``detect`` (:mod:`memvault.scanner.review`), asked
        about the texts the cascade is unsure of, as ``review`` says.
    :param review: when the reviewer is asked and which verdicts it may overturn.
    """

    def __init__(
        self,
        *,
        detect: Callable[[str], Finding | None] = scan,
        cache_size: int = CACHE_SIZE,
        policy: ScanPolicy = DEFAULT_POLICY,
        embedder: Embedder | None = None,
        classifiers: Sequence[Callable[[str], Iterable[Hit]]] = (),
        reviewer: Reviewer | None = None,
        review: ReviewPolicy = DEFAULT_REVIEW,
    ) -> None:
        self._builtin = detect is scan
        self.classifiers = tuple(classifiers)
        if reviewer is not None and not (isinstance(reviewer, Reviewer) and isinstance(reviewer.name, str)):
            raise InvalidRequest(
                f"the scanner's reviewer {reviewer!r} is not a memvault.scanner.review.Reviewer: it needs a `name` "
                "(a string shown in verdicts and logs) and a method `review(text, draft)` returning a Review or None",
                field="reviewer",
            )
        #: The second reader (``None``: the cascade decides alone).
        self.reviewer = reviewer if self._builtin else None
        self.review = review
        #: How the reviewer's answers went: ``asked``, ``unanswered``, ``rejected`` (an attack the cascade
        #: stored), ``cleared`` (a rejection overturned), ``confirmed`` (the answer left the verdict).
        self.reviews: Counter[str] = Counter()
        self._unreviewed = threading.local()
        self.policy = policy
        self._scan: Callable[[str], Finding | None] = (
            functools.partial(scan, policy=policy) if self._builtin and policy is not DEFAULT_POLICY else detect
        )
        self._embedder = embedder
        #: The check by meaning, once bound to an embedder (``None``: the rules alone).
        self.semantic: SemanticCheck | None = None
        if (self.classifiers or self.reviewer is not None) and self._builtin:
            self._scan = self._cascade
        if embedder is not None:
            self._use_embedder(embedder)
        self._cache: OrderedDict[str, Finding | None] = OrderedDict()
        self._cache_size = cache_size
        self._joint_cache: OrderedDict[str, Finding | None] = OrderedDict()
        # sha256 states of the bodies appends produced, by digest (insertion order; the oldest go first).
        self._states: OrderedDict[str, Any] = OrderedDict()
        self._states_size = max(1, min(cache_size, STATES_SIZE))
        self._lock = threading.Lock()
        self._provider = "?"
        self._read: Any = None
        self._recall: Any = None
        self._keep: Any = None
        self._checks_stored = False
        self.scans = 0  # bodies actually scanned (cache misses), for tests and benchmarks
        after_fork_in_child(self, _new_lock)

    def bind_vault(self, vault: Any) -> None:
        """Reach the vault's other plugins: every hook call below skips this scanner's own wrappers."""
        manager = vault.plugin_manager
        self._provider = vault.name
        if self._embedder is None:
            embedder = getattr(vault, "scan_embedder", None)
            if embedder is not None:
                self._use_embedder(embedder)
        self._checks_stored = Capability.CHECKS_STORED in getattr(vault, "capabilities", ())
        self._read = manager.subset_hook_caller("memvault_read", remove_plugins=[self])
        self._recall = manager.subset_hook_caller("memvault_recall", remove_plugins=[self])
        self._keep = manager.subset_hook_caller("memvault_quarantine_keep", remove_plugins=[self])

    def _use_embedder(self, embedder: Embedder) -> None:
        """Judge by meaning too (the builtin rules only, and only when the policy says so)."""
        if not self._builtin or not self.policy.semantic:
            return
        from memvault.scanner.semantic import SemanticCheck  # numpy and the intents load only here

        self.semantic = SemanticCheck(embedder)
        self._scan = self._cascade

    def _cascade(self, text: str, together: bool = False) -> Finding | None:
        """The rules and the classifiers, then (for what they do not reject) the check by meaning, one verdict;
        then the reviewer, when there is one and its answer can change that verdict.

        ``together``: ``text`` is a recall's hits read together. Each of their documents was judged alone,
        with the reviewer, so the reviewer is asked only to overturn the cascade's rejection of the whole (a
        document it stored must not be withheld from a recall on the cascade's word), never to add evidence:
        a recall would ask the model about nearly every new set of hits, and about each subset it tests."""
        extra = [hit for classify in self.classifiers for hit in classify(text)] if self.classifiers else []
        words: set[str] = set()
        finding, hits = scan_hits(text, self.policy, extra, words)
        semantic = self.semantic
        meant: list[Hit] = []
        read = False
        if finding is None and semantic is not None:
            meant, read = semantic.judge(text, suspicious=bool(hits), words=words)
            if meant:
                finding = decide([*hits, *meant], self.policy)
        if self.reviewer is None:
            return finding
        draft = Draft(
            finding=finding,
            hits=(*hits, *meant),
            by_rules=finding is not None and _rules_reject((*hits, *finding.hits), self.policy),
            read_by_model=read,
        )
        if together and finding is None:
            return None
        return self._reviewed(text, draft) if self.review.asks(draft) else finding

    def _reviewed(self, text: str, draft: Draft) -> Finding | None:
        """The verdict once the reviewer answered on ``text``; with no answer, the draft's, marked unreviewed
        (not cached: the next read of the text asks again)."""
        reviewer = self.reviewer
        assert reviewer is not None
        try:
            answer = reviewer.review(text, draft)
        except Exception as exc:  # noqa: BLE001 - a reviewer's bug is no answer, never a verdict
            log.warning(
                "the reviewer %r failed (%s: %s); the cascade's verdict stands", reviewer.name, type(exc).__name__, exc
            )
            answer = None
        with self._lock:
            self.reviews["asked"] += 1
        if not isinstance(answer, Review):
            with self._lock:
                self.reviews["unanswered"] += 1
            self._unreviewed.flag = True
            if draft.finding is None and self.review.unanswered == "refuse":
                self._unreviewed.refuse = reviewer.name
            return draft.finding
        if draft.finding is not None:
            if answer.attack:
                outcome, verdict = "confirmed", draft.finding
            else:
                outcome, verdict = "cleared", None
                log.info(
                    "the reviewer %r reads as benign a text the scanner rejected (%s, %s; sha256 %s): stored",
                    reviewer.name,
                    draft.finding.category,
                    draft.finding.pattern,
                    body_sha256(text),
                )
        elif answer.attack:
            verdict = decide([*draft.hits, review_hit(answer, reviewer.name, len(text))], self.policy)
            outcome = "rejected" if verdict is not None else "confirmed"
        else:
            outcome, verdict = "confirmed", None
        with self._lock:
            self.reviews[outcome] += 1
        return verdict

    def _write_verdict(
        self, judge: Callable[..., tuple[str, Finding | None]], *args: Any
    ) -> tuple[str, Finding | None]:
        """``judge(*args)`` for a write: a text it would store although the reviewer was asked and gave no
        answer raises ``UpstreamError`` when the review policy says ``unanswered = "refuse"``."""
        self._unreviewed.refuse = ""
        digest, finding = judge(*args)
        refused, self._unreviewed.refuse = self._unreviewed.refuse, ""
        if refused and finding is None:
            raise UpstreamError(
                f"the scanner's reviewer {refused!r} gave no answer on this write, and the scanner refuses writes "
                'its reviewer did not judge (unanswered = "refuse"): nothing was written; retry later, or see '
                "the reviewer's warnings on the memvault.scanner loggers for why it did not answer"
            )
        return digest, finding

    def _cacheable(self) -> bool:
        """Whether the verdict this thread just computed may be cached (no reviewer's answer was missing)."""
        if getattr(self._unreviewed, "flag", False):
            self._unreviewed.flag = False
            return False
        return True

    # -- verdicts -------------------------------------------------------------

    def verdict(self, body: str) -> tuple[str, Finding | None]:
        """The body's sha256 and the scan's finding (``None``: clean), cached by sha256."""
        digest = body_sha256(body)
        cached = self._cached(digest)
        if cached is not _UNKNOWN:
            return digest, cached
        return digest, self._remember(digest, self._scan(body))

    def _cached(self, digest: str) -> Finding | None:
        """The cached verdict for ``digest``, or ``_UNKNOWN``."""
        with self._lock:
            if digest in self._cache:
                self._cache.move_to_end(digest)
                return self._cache[digest]
        return _UNKNOWN

    def _remember(self, digest: str, finding: Finding | None, state: Any = None) -> Finding | None:
        cacheable = self._cacheable()
        with self._lock:
            self.scans += 1
            if not cacheable:
                return finding
            self._cache[digest] = finding
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            if state is not None:
                self._keep_state(digest, state)
        return finding

    def _append_verdict(self, old: str, content: str, old_digest: str = "") -> tuple[str, Finding | None]:
        """The digest of and the verdict on ``old + content``; when ``old`` is known clean, only its tail
        is rescanned.

        ``old_digest`` is ``old``'s sha256 when the provider gave it (else it is
        computed). Every builtin rule's match is either confined to one line or
        spans a bounded number of non-space characters, and base64 blocks are
        whole lines, so a match in ``old + content`` that is not in the clean
        ``old`` starts inside :func:`tail_start`'s window. Only for the builtin
        rules (a custom scan function gets the whole body).

        The final digest continues the sha256 state kept for ``old_digest`` when
        this scanner produced that body's digest itself (the previous append)
        and the body is at least :data:`STATE_MIN_CHARS` long, so a long ``old``
        is not hashed again: an append costs hashing its content, not the
        whole document.
        """
        state = None
        if old_digest and len(old) >= STATE_MIN_CHARS:
            with self._lock:
                state = self._states.get(old_digest)
        if state is not None:
            body_hash = state.copy()
        else:
            body_hash = hashlib.sha256(old.encode("utf-8"))
            if not old_digest:
                old_digest = body_hash.hexdigest()
        body_hash.update(content.encode("utf-8"))
        digest = body_hash.hexdigest()
        with self._lock:
            cached = self._cache.get(digest, _UNKNOWN)
            if cached is not _UNKNOWN:
                self._cache.move_to_end(digest)
                if len(old) + len(content) >= STATE_MIN_CHARS:
                    self._keep_state(digest, body_hash)
                return digest, cached
            old_clean = bool(old) and self._cache.get(old_digest, _UNKNOWN) is None
        if self._builtin and old_clean:
            finding = self._scan(old[tail_start(old) :] + content)
        else:
            finding = self._scan(old + content)
        return digest, self._remember(
            digest, finding, body_hash if len(old) + len(content) >= STATE_MIN_CHARS else None
        )

    def _keep_state(self, digest: str, state: Any) -> None:
        """Keep the sha256 state of the body ``digest`` names, for the next append to it (under the lock)."""
        self._states[digest] = state
        if len(self._states) > self._states_size:
            self._states.popitem(last=False)

    def _bound(self, caller: Any, hook: str) -> Any:
        if caller is None:
            raise PluginError(
                f"the scanner was not bound to a vault, so it cannot call {hook}: register it through "
                "memvault.open(..., scanner=...) or Vault(provider, plugins=[scanner])"
            )
        return caller

    def _stored_body(self, request: ReadRequest) -> str:
        result = self._bound(self._read, "memvault_read")(request=request)
        return result.content if isinstance(result, ReadResult) and result.quarantine is None else ""

    # -- write path -------------------------------------------------------------

    @hookimpl(wrapper=True)
    def memvault_retain(self, request: RetainRequest) -> Generator[None, RetainResult, RetainResult]:
        with reviewing_for(request.workspace_id):  # the reviewer may share its slots by workspace
            return (yield from self._wrapped_retain(request))

    def _wrapped_retain(self, request: RetainRequest) -> Generator[None, RetainResult, RetainResult]:
        if _over_cap(request):
            # Content that alone is over its tier's cap cannot be stored by any provider (P9: it raises
            # CapExceeded, naming the stored size, before writing): scanning it would only let one
            # caller spend the service's CPU on writes that never land (seconds for some 1 MB shapes).
            # What a provider returns is scanned again on every read and recall.
            return (yield)
        view = current_rendered_view()
        if view is not None:
            digest, finding = self._write_verdict(self._view_verdict, view)
            if finding is not None:
                self._reject(request, view.text, digest, finding, seen_with=True)
        if request.mode is not Mode.APPEND:
            digest, finding = self._write_verdict(self.verdict, request.content)
            if finding is not None:
                self._reject(request, request.content, digest, finding)
            return (yield)
        if not self._checks_stored:
            # Read the stored body back through the provider: its write may append to a later one (a race
            # the read path's scan covers), and the read costs a provider call per append.
            old = self._stored_body(
                ReadRequest(
                    workspace_id=request.workspace_id,
                    agent_id=request.agent_id,
                    crew_id=request.crew_id,
                    tier=request.tier,
                    key=request.key,
                )
            )
            digest, finding = self._write_verdict(self._append_verdict, old, request.content)
            if finding is not None:
                self._reject(request, old + request.content, digest, finding)
            return (yield)
        # The provider checks the stored body inside its own write (capability checks_stored).
        check = _AppendCheck(self, request)
        with stored_check(check):
            try:
                result = yield
            except Exception:
                if check.rejected is None:
                    raise
                # The check rejected inside the write, which wrote nothing; the copy is kept below,
                # outside the provider's write lock.
                result = None
        if check.rejected is not None:
            self._reject(request, *check.rejected)
        if not check.called:
            raise PluginError(
                f"provider {self._provider!r} declares the capability checks_stored but its retain did not "
                "call memvault.check_stored(stored_body, digest) for an append, so the write was stored "
                "without its final body being scanned (reads and recalls still scan it): call it inside the "
                "write, before writing, or stop declaring the capability; this is a bug in the provider"
            )
        assert result is not None
        return result

    def _view_verdict(self, view: RenderedView) -> tuple[str, Finding | None]:
        """The digest of and the verdict on what the model will read once a write lands.

        When the view extends text the model already read (``view.extends``) and
        that text was judged clean, only its tail and what follows are rescanned,
        as for an append.
        """
        if view.extends:
            return self._append_verdict(view.extends, view.text[len(view.extends) :])
        return self.verdict(view.text)

    def _check_append(self, request: RetainRequest, stored: str, digest: str) -> tuple[str, str, Finding] | None:
        """The check run inside the provider's write: ``None`` when ``stored + content`` is clean,
        else what :meth:`_reject` needs (final body, its digest, the finding)."""
        final_digest, finding = self._write_verdict(self._append_verdict, stored, request.content, digest)
        if finding is None:
            return None
        return stored + request.content, final_digest, finding

    def _reject(
        self, request: RetainRequest, body: str, digest: str, finding: Finding, *, seen_with: bool = False
    ) -> None:
        """Keep a quarantine copy of ``body`` and raise ``ContentRejected``.

        ``seen_with``: ``body`` is the view the writer declared (what the model reads with this write),
        not the document's final body; the copy is that view.
        """
        record = QuarantineRecord(
            workspace_id=request.workspace_id,
            agent_id=request.agent_id if request.tier is not Tier.CREW else "",
            crew_id=request.crew_id if request.tier is Tier.CREW else "",
            label=request.label,
            category=finding.category,
            pattern=finding.pattern,
            sha256=digest,
            content=body,
            data_subject_id=request.data_subject_id,
            expires_at=request.purge_at(),
        )
        details = finding.describe()
        if seen_with:
            details = (
                "in what the model will read once this write lands (the view its writer declared, such as a "
                f"notes slot's whole notebook), not in the write alone: {details}"
            )
        try:
            kept = self._bound(self._keep, "memvault_quarantine_keep")(record=record) is True
        except Exception as exc:  # fail closed: the write fails whatever the store does
            raise ContentRejected(
                category=finding.category,
                pattern=finding.pattern,
                sha256=digest,
                detail=f"{details}; no quarantine copy was kept: {type(exc).__name__}: {exc}",
                kept=False,
                **_extras(finding),
            ) from exc
        if not kept:
            details += f"; no quarantine copy was kept: provider {self._provider!r} has no quarantine store"
        raise ContentRejected(
            category=finding.category,
            pattern=finding.pattern,
            sha256=digest,
            detail=details,
            kept=kept,
            **_extras(finding),
        )

    # -- read path ------------------------------------------------------------

    @hookimpl(wrapper=True)
    def memvault_read(self, request: ReadRequest) -> Generator[None, ReadResult, ReadResult]:
        with reviewing_for(request.workspace_id):  # the reviewer may share its slots by workspace
            return (yield from self._wrapped_read(request))

    def _wrapped_read(self, request: ReadRequest) -> Generator[None, ReadResult, ReadResult]:
        result = yield
        if not isinstance(result, ReadResult) or result.quarantine is not None or not result.content:
            return result
        digest, finding = self.verdict(result.content)
        if finding is None:
            return result
        quarantine = Quarantine(category=finding.category, pattern=finding.pattern, sha256=digest)
        return ReadResult(id=result.id, content=blocked_placeholder(quarantine), quarantine=quarantine)

    @hookimpl(wrapper=True)
    def memvault_recall(self, request: RecallRequest) -> Generator[None, RecallResult, RecallResult]:
        with reviewing_for(request.workspace_id):  # the reviewer may share its slots by workspace
            return (yield from self._wrapped_recall(request))

    def _wrapped_recall(self, request: RecallRequest) -> Generator[None, RecallResult, RecallResult]:
        result = yield
        if not isinstance(result, RecallResult) or not result.hits:
            return result
        hits, quarantined = result.hits, result.quarantined
        blocked = self._blocked_sources(request, _digests(hits))
        if blocked:
            hits = [h for h in hits if h.source not in blocked]
            if len(hits) < request.limit < MAX_RECALL_LIMIT:
                # Dropped hits left room: ask once more with the widest limit and filter again.
                wider = self._bound(self._recall, "memvault_recall")(
                    request=attrs.evolve(request, limit=MAX_RECALL_LIMIT)
                )
                if isinstance(wider, RecallResult):
                    fresh = {src: d for src, d in _digests(wider.hits).items() if src not in blocked}
                    blocked |= self._blocked_sources(request, fresh)
                    hits = [h for h in wider.hits if h.source not in blocked]
            hits = hits[: request.limit]
            quarantined = sorted(set(quarantined) | blocked)
        together = self._withheld_together(request, hits)
        if together:
            hits = [h for h in hits if h.source not in together]
            quarantined = sorted(set(quarantined) | together)
        if not blocked and not together:
            return result
        return attrs.evolve(result, hits=hits, quarantined=quarantined)

    def _joint(self, hits: list[RecallSnippet]) -> Finding | None:
        """The verdict on ``hits`` read together (:func:`recalled_text`), cached by the text's sha256."""
        text = recalled_text(h.snippet for h in hits)
        digest = body_sha256(text)
        with self._lock:
            if digest in self._joint_cache:
                self._joint_cache.move_to_end(digest)
                return self._joint_cache[digest]
        finding = self._cascade(text, together=True) if self._scan == self._cascade else self._scan(text)
        if not self._cacheable():
            return finding
        with self._lock:
            self._joint_cache[digest] = finding
            if len(self._joint_cache) > JOINT_CACHE_SIZE:
                self._joint_cache.popitem(last=False)
        return finding

    def _withheld_together(self, request: RecallRequest, hits: list[RecallSnippet]) -> set[str]:
        """The labels of the documents whose hits, read together with the others, fail the scan (P19).

        Each document already passed on its own, so a finding here is made of
        several hits (or of lines of one document that the ranking put side by
        side). The hits that make it up are found by leaving hits out
        (:func:`_parts`); their documents are withheld, and the rest judged
        again, until what is left reads clean. Only a recall that fails
        together pays for more than the one scan.
        """
        if len(hits) < 2:
            return set()
        finding = self._joint(hits)
        withheld: set[str] = set()
        remaining = hits
        while finding is not None:
            parts = {remaining[i].source for i in _parts(remaining, self._joint)}
            where = ", ".join(
                f"{name} {ident!r}" for name, ident in (("agent", request.agent_id), ("crew", request.crew_id)) if ident
            )
            log.warning(
                "recall withheld %s (workspace %r, %s): read together, their hits fail the scan "
                "(category %s, rule %s) though each document passes alone; nothing was written or changed",
                ", ".join(sorted(parts)),
                request.workspace_id,
                where,
                finding.category,
                finding.pattern,
            )
            withheld |= parts
            remaining = [h for h in remaining if h.source not in parts]
            finding = self._joint(remaining) if remaining else None
        return withheld

    def _blocked_sources(self, request: RecallRequest, sources: dict[str, str]) -> set[str]:
        """The labels among ``sources`` (label -> body digest, or "") whose documents fail the scan.

        A digest the provider reported with its hits finds a cached verdict
        without reading the document; otherwise the document is read and scanned.
        """
        blocked: set[str] = set()
        for label, digest in sorted(sources.items()):
            if digest:
                known = self._cached(digest)
                if known is not _UNKNOWN:
                    if known is not None:
                        blocked.add(label)
                    continue
            try:
                tier, key = parse_label(label, "source")
            except InvalidRequest as exc:
                raise PluginError(
                    f"provider {self._provider!r} returned a recall hit whose source {label[:80]!r} is not a "
                    "document label (contract P4); this is a bug in the provider"
                ) from exc
            crew = tier is Tier.CREW
            body = self._stored_body(
                ReadRequest(
                    workspace_id=request.workspace_id,
                    agent_id="" if crew else request.agent_id,
                    crew_id=request.crew_id if crew else "",
                    tier=tier,
                    key=key,
                )
            )
            if body and self.verdict(body)[1] is not None:
                blocked.add(label)
        return blocked


def _over_cap(request: RetainRequest) -> bool:
    """Whether ``request.content`` alone is over its tier's cap (P9), so no stored body can take it."""
    cap = CAPS[request.tier]
    if cap is None or len(request.content) * 4 <= cap:  # at most 4 UTF-8 bytes a character
        return False
    return len(request.content) > cap or len(request.content.encode("utf-8")) > cap


class _AppendCheck:
    """The check one append installs around the provider's write (:func:`memvault.contract.scanning.check_stored`).

    The provider may call it more than once (a write retried after a lock
    timeout): each call judges the stored body it is given, and the last one
    counts.
    """

    __slots__ = ("called", "rejected", "request", "scanner")

    def __init__(self, scanner: BuiltinScanner, request: RetainRequest) -> None:
        self.scanner = scanner
        self.request = request
        self.called = False
        self.rejected: tuple[str, str, Finding] | None = None

    def nothing_written(self) -> None:
        """The provider repeats an idempotent write (P44): nothing is written, so nothing to scan."""
        self.called = True

    def __call__(self, stored: str, digest: str) -> None:
        self.called = True
        self.rejected = self.scanner._check_append(self.request, stored, digest)
        if self.rejected is not None:
            _, final_digest, finding = self.rejected
            # Aborts the provider's write; the scanner's wrapper replaces it with the full error.
            raise ContentRejected(
                category=finding.category,
                pattern=finding.pattern,
                sha256=final_digest,
                detail=finding.describe(),
                kept=False,
                **_extras(finding),
            )


def _parts(hits: list[RecallSnippet], judge: Callable[[list[RecallSnippet]], Finding | None]) -> list[int]:
    """The indexes of the hits that make up one finding in ``hits`` read together (``judge`` fails them).

    The shortest failing prefix ends with a part; the shortest failing run that
    ends there starts with one; a hit between them is a part when leaving it out
    clears the run. A judge that fails no prefix (not monotonic) gives every hit.
    """
    end = next((k for k in range(1, len(hits) + 1) if judge(hits[:k]) is not None), 0)
    if end == 0:
        return list(range(len(hits)))
    start = next(j for j in range(end - 1, -1, -1) if judge(hits[j:end]) is not None)
    run = hits[start:end]
    between = [m for m in range(1, len(run) - 1) if judge(run[:m] + run[m + 1 :]) is None]
    return sorted({start, end - 1, *(start + m for m in between)})


def _rules_reject(hits: Iterable[Hit], policy: ScanPolicy) -> bool:
    """Whether the builtin rules' hits among ``hits`` reject on their own (without a model's evidence)."""
    return decide([h for h in hits if h.pattern in PATTERN_IDS], policy) is not None


def _extras(finding: Finding) -> dict[str, Any]:
    """The optional ``ContentRejected`` fields a finding fills."""
    return {"excerpt": finding.excerpt, "span": finding.span, "score": finding.score, "threshold": finding.threshold}


def _digests(hits: list[RecallSnippet]) -> dict[str, str]:
    """Each hit source's body digest as the provider reported it ("" when it did not)."""
    out: dict[str, str] = {}
    for hit in hits:
        out[hit.source] = out.get(hit.source) or hit.digest
    return out


def builtin_scanner(policy: Mapping[str, Any] | None = None) -> BuiltinScanner:
    """The ``builtin`` scanner's factory: ``policy`` is the ``[scan]`` table of ``memvault.toml``.

    :raises InvalidRequest: naming the table's bad key, category or rule id.
    """
    return BuiltinScanner(policy=ScanPolicy.from_table(policy))


@hookimpl
def memvault_register_scanners(register: RegisterScanner) -> None:
    register("builtin", builtin_scanner)
