"""Layer 4, the facade users call: :class:`Vault`, :class:`AsyncVault` and the ``open`` functions.

A vault owns one pluggy plugin manager carrying the provider-verb and
lifecycle specs, holding the chosen provider instance, the plugins every vault
gets (the default lifecycle, from the registry) and the cross-cutting plugins
(the scanner). It checks each request's type (the request validated itself at
construction) and calls the hook through a typed wrapper method. A provider
translates its own library's exceptions; the vault turns what still escapes
into a memvault error with the cause chained: stdlib ``TimeoutError`` and
``OSError`` into ``UpstreamTimeout``/``UpstreamError``, anything else into
``PluginError`` (a bug in the provider).

A vault whose provider declares ``vectors`` and that has an embedder recalls by
meaning too (:mod:`memvault.embedding`): it embeds each recall's query for the
provider and embeds new lines in the background (contract P36-P40).

Memory over time (contract P41-P45): the vault checks each retain's expiry and
idempotency key against the provider's capabilities, sets the write's
``retention`` from its :class:`~memvault.contract.retention.RetentionPolicy`,
sweeps what expired on demand (:meth:`Vault.sweep_expired`) and in a background
thread every ``sweep_interval`` (:class:`_Sweeper`).

May import: :mod:`memvault.contract`, :mod:`memvault.hooks`,
:mod:`memvault.registry`, :mod:`memvault.config`, :mod:`memvault.embedding` and
:mod:`memvault.telemetry` (each verb and lifecycle phase is a span when tracing is on).
"""

from __future__ import annotations

import asyncio
import atexit
import datetime as _dt
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs
import pluggy

from memvault.contract import clock
from memvault.contract.embedding import Embedder
from memvault.contract.errors import (
    InvalidRequest,
    MemvaultError,
    NotSupported,
    PluginError,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
)
from memvault.contract.lifecycle import LifecycleContext
from memvault.contract.models import (
    Capability,
    DocumentInfo,
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
    validate_identifier,
    validate_sha256,
)
from memvault.contract.retention import (
    DEFAULT_IDEMPOTENCY_WINDOW,
    DEFAULT_SWEEP_INTERVAL,
    MAX_SWEEP_LIMIT,
    RetentionPolicy,
    SweepRequest,
    SweepResult,
    format_duration,
    idempotency_window_from,
    sweep_interval_from,
)
from memvault.embedding import DrainReport, Embedding
from memvault.hooks import lifecycle as lifecycle_specs
from memvault.hooks import provider as provider_specs
from memvault.registry import coerce_settings, get_registry, make_manager, missing_settings
from memvault.telemetry import configure as configure_telemetry
from memvault.telemetry import traced

if TYPE_CHECKING:
    from memvault.config import Config

__all__ = ["AsyncVault", "SweepReport", "Vault", "open", "open_async", "open_configured", "open_from_config"]

#: Default health deadlines in seconds (contract P26).
LOCAL_HEALTH_DEADLINE: Final = 0.2
REMOTE_HEALTH_DEADLINE: Final = 1.0
#: The most retains :meth:`Vault.retain_many` commits in one write group (P34).
GROUP_SIZE: Final = 64
log = logging.getLogger("memvault.vault")

_VERBS: Final = ("memvault_retain", "memvault_recall", "memvault_read", "memvault_forget", "memvault_health")
#: The hooks a provider declaring ``vectors`` implements (P37).
_VECTOR_HOOKS: Final = ("memvault_vectors_pending", "memvault_vectors_store", "memvault_vectors_backlog")

_R = TypeVar("_R")


@attrs.frozen(kw_only=True)
class SweepReport:
    """What :meth:`Vault.sweep_expired` removed (or, in a dry run, would remove) (P43).

    ``documents`` lists each document; ``truncated`` is set when a dry run found
    more than it lists (:data:`~memvault.contract.retention.MAX_SWEEP_LIMIT`).
    """

    documents: list[DocumentInfo]
    quarantine_removed: int
    keys_removed: int
    dry_run: bool
    truncated: bool = False
    seconds: float = 0.0


#: The live sweepers, stopped before the interpreter exits (like the embedding workers).
_SWEEPERS: weakref.WeakSet[_Sweeper] = weakref.WeakSet()


@atexit.register
def _stop_every_sweeper() -> None:
    for sweeper in list(_SWEEPERS):
        sweeper.close(timeout=5.0)


class _Sweeper:
    """A vault's background sweep (P43): a daemon thread calling :meth:`Vault.sweep_expired` every
    ``interval``, the first time after ``min(interval, 60 s)``; stopped by :meth:`close`."""

    FIRST_DELAY: Final = 60.0

    def __init__(self, vault: Vault, interval: _dt.timedelta) -> None:
        self._vault = weakref.ref(vault)
        self._interval = interval.total_seconds()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"memvault-sweep-{vault.name}", daemon=True)
        _SWEEPERS.add(self)
        self._thread.start()

    def _run(self) -> None:
        delay = min(self._interval, self.FIRST_DELAY)
        while not self._stop.wait(delay):
            delay = self._interval
            vault = self._vault()
            if vault is None:
                return
            try:
                report = vault.sweep_expired()
            except Exception:  # a sweep that fails is tried again at the next interval
                log.warning("background sweep of provider %r failed; retrying in %s", vault.name, delay, exc_info=True)
            else:
                if report.documents or report.quarantine_removed or report.keys_removed:
                    log.info(
                        "swept provider %r: %d documents, %d quarantine copies, %d idempotency keys",
                        vault.name,
                        len(report.documents),
                        report.quarantine_removed,
                        report.keys_removed,
                    )
            del vault

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


def _wrap(exc: Exception, provider: str, verb: str) -> MemvaultError:
    where = f"provider {provider!r} ({verb})"
    if isinstance(exc, TimeoutError):
        return UpstreamTimeout(f"{where} timed out: {exc}")
    if isinstance(exc, OSError):
        return UpstreamError(f"{where} failed on its storage: {type(exc).__name__}: {exc}")
    return PluginError(f"{where} raised {type(exc).__name__}: {exc}; this is a bug in the provider")


def _named(exc: MemvaultError, provider: str) -> MemvaultError:
    """``exc``, or for a ``NotSupported`` that does not name the provider, one that does (P24).

    A provider is never told the name it was registered under, so the Vault,
    which knows it, says which provider lacks the capability.
    """
    if type(exc) is not NotSupported or repr(provider) in str(exc):
        return exc
    return NotSupported(f"provider {provider!r}: {exc}")


class Vault:
    """Retain, recall, read, forget and health over one provider.

    Build one with :func:`memvault.open` or :func:`memvault.open_from_config`;
    wrap your own provider instance directly with ``Vault(provider)``.

    :param provider: an object whose methods carry ``@memvault.hookimpl`` for
        the five verb hooks.
    :param name: the provider's registered name, used in error messages.
    :param capabilities: the optional capabilities the provider declares.
    :param plugins: cross-cutting plugins (wrappers) to register around the provider;
        one with a ``bind_vault(vault)`` method is handed this vault once registered.
    :param health_timeout: the health deadline in seconds (default 0.2 s, or
        1.0 s for a ``remote`` provider).
    :param embedder: recall by meaning with this embedder (contract P36), when the
        provider declares ``vectors``; ignored otherwise (``None``: by words only).
    :param background_embedding: embed new lines in a background thread (default);
        ``False`` leaves them pending until :meth:`embed_pending` (short-lived commands).
    :param retention: how long each tier keeps a document after its last write (P43);
        needs a provider with the ``expiry`` capability (``None``: kept until their own expiry).
    :param idempotency_window: how long the provider remembers an idempotency key (P45; 24 h).
    :param sweep_interval: how often the background sweep runs (``None``: never; 1 h).
    :param background_sweep: run the background sweep (default) when the provider stores
        expiries or keys; ``False`` for short-lived commands (they sweep with :meth:`sweep_expired`).
    """

    def __init__(
        self,
        provider: object,
        *,
        name: str = "custom",
        capabilities: Iterable[str] = (),
        plugins: Iterable[object] = (),
        health_timeout: float | None = None,
        embedder: Embedder | None = None,
        background_embedding: bool = True,
        retention: RetentionPolicy | None = None,
        idempotency_window: _dt.timedelta = DEFAULT_IDEMPOTENCY_WINDOW,
        sweep_interval: _dt.timedelta | None = DEFAULT_SWEEP_INTERVAL,
        background_sweep: bool = True,
    ) -> None:
        self.name = name
        self.provider = provider
        self.capabilities = frozenset(capabilities)
        if health_timeout is None:
            remote = Capability.REMOTE in self.capabilities
            health_timeout = REMOTE_HEALTH_DEADLINE if remote else LOCAL_HEALTH_DEADLINE
        if not 0 < health_timeout < math.inf:  # nan fails it too
            raise InvalidRequest("health_timeout must be a positive, finite number of seconds", field="health_timeout")
        self.health_timeout = float(health_timeout)
        self.plugin_manager = make_manager(provider_specs, lifecycle_specs)
        for index, (source, plugin) in enumerate(get_registry().vault_plugins()):
            try:
                self.plugin_manager.register(plugin, name=f"{source}:{index}:{type(plugin).__name__}")
            except (pluggy.PluginValidationError, ValueError) as exc:
                raise PluginError(
                    f"plugin {source!r}: its vault plugin does not fit memvault's hook specs: {exc}"
                ) from exc
        try:
            self.plugin_manager.register(provider, name=f"provider:{name}")
            for index, plugin in enumerate(plugins):
                self.plugin_manager.register(plugin, name=f"{name}:plugin:{index}:{type(plugin).__name__}")
            self.plugin_manager.check_pending()
        except (pluggy.PluginValidationError, ValueError) as exc:
            raise PluginError(f"provider {name!r} does not fit memvault's hook specs: {exc}") from exc
        missing = [
            verb
            for verb in _VERBS
            if not any(i.plugin is provider for i in getattr(self.plugin_manager.hook, verb).get_hookimpls())
        ]
        if missing:
            raise PluginError(
                f"provider {name!r} does not implement {', '.join(missing)}: a provider must "
                "implement all five verb hooks with @memvault.hookimpl"
            )
        self._hook = self.plugin_manager.hook
        self._closed = False
        self.embedding: Embedding | None = None
        #: The embedder the scanner's check by meaning uses (whatever the provider stores: verdicts
        #: do not depend on it); ``None``: the scanner judges by its rules alone.
        self.scan_embedder: Embedder | None = embedder
        if embedder is not None and Capability.VECTORS in self.capabilities:
            absent = [h for h in _VECTOR_HOOKS if not self._provides(h)]
            if absent:
                raise PluginError(
                    f"provider {name!r} declares the capability 'vectors' but does not implement "
                    f"{', '.join(absent)}: implement them, or do not declare 'vectors'"
                )
            self.embedding = Embedding(self._hook, embedder, provider=name, background=background_embedding)
        # Cross-cutting plugins (the scanner) reach the provider's own hooks through the vault.
        for plugin in self.plugin_manager.get_plugins():
            bind = getattr(plugin, "bind_vault", None)
            if plugin is not provider and callable(bind):
                bind(self)
        try:
            self._init_retention(retention, idempotency_window, sweep_interval, background_sweep)
        except BaseException:
            if self.embedding is not None:  # its worker already runs: a vault refused here leaves no thread
                self.embedding.close()
            raise

    def _init_retention(
        self,
        retention: RetentionPolicy | None,
        idempotency_window: _dt.timedelta,
        sweep_interval: _dt.timedelta | None,
        background_sweep: bool,
    ) -> None:
        """Check the policy against the provider's capabilities and start the background sweep (P43)."""
        policy = retention if retention is not None else RetentionPolicy()
        if not isinstance(policy, RetentionPolicy):
            raise InvalidRequest("retention must be a memvault.contract.retention.RetentionPolicy", field="retention")
        if policy and Capability.EXPIRY not in self.capabilities:
            raise NotSupported(
                f"provider {self.name!r} does not store expiries (it lacks the 'expiry' capability), so a "
                "retention policy would keep everything for ever: remove [retention]'s tier durations, or use "
                "a provider that has it (memory, sqlite, postgres, local-disk)"
            )
        expiring = {Capability.EXPIRY, Capability.IDEMPOTENT_WRITES} & self.capabilities
        remote = Capability.REMOTE in self.capabilities  # its service sweeps; the client need not
        if expiring and not remote and not self._provides("memvault_sweep_expired"):
            raise PluginError(
                f"provider {self.name!r} declares {', '.join(sorted(expiring))} but does not implement "
                "memvault_sweep_expired: implement it, or do not declare the capability"
            )
        if not isinstance(idempotency_window, _dt.timedelta) or idempotency_window <= _dt.timedelta(0):
            raise InvalidRequest("idempotency window must be a positive duration", field="idempotency.window")
        self.retention = policy
        self.idempotency_window = idempotency_window
        self.sweep_interval = sweep_interval
        self._sweeper: _Sweeper | None = None
        if (
            background_sweep
            and sweep_interval is not None
            and expiring
            and not remote  # a service sweeps its own store
        ):
            self._sweeper = _Sweeper(self, sweep_interval)

    # -- verbs ---------------------------------------------------------------

    @traced("retain")
    def retain(self, request: RetainRequest) -> RetainResult:
        """Store content in one document (contract P5-P13)."""
        _expect(request, RetainRequest)
        request = self._over_time(request)
        result = self._call(self._hook.memvault_retain, "retain", RetainResult, request)
        if self.embedding is not None:
            self.embedding.notify()
        return result

    def _over_time(self, request: RetainRequest) -> RetainRequest:
        """Check a retain's expiry and idempotency key (P41, P44) and set its ``retention`` (P43).

        :raises NotSupported: for an expiry or a key the provider cannot keep.
        :raises InvalidRequest: for an expiry not after now.
        """
        if request.idempotency_key and Capability.IDEMPOTENT_WRITES not in self.capabilities:
            raise NotSupported(
                f"provider {self.name!r} cannot make a write idempotent (it lacks the 'idempotent_writes' "
                "capability): send the retain without idempotency_key, or use a provider that has it"
            )
        if request.expires_at is not None:
            if Capability.EXPIRY not in self.capabilities:
                raise NotSupported(
                    f"provider {self.name!r} does not store expiries (it lacks the 'expiry' capability), so the "
                    "document would be kept for ever: send the retain without expires_at, or use a provider "
                    "that has it"
                )
            now = clock.now()
            if request.expires_at <= now:
                raise InvalidRequest(
                    f"expires_at {request.expires_at.isoformat()} is in the past (now is {now.isoformat()}): "
                    "give a time in the future, or do not retain content that has already expired",
                    field="expires_at",
                )
        retention = self.retention.for_(request.workspace_id, request.tier) if self.retention else None
        if request.retention != retention:
            request = attrs.evolve(request, retention=retention)
        return request

    @traced("retain_many")
    def retain_many(self, requests: Sequence[RetainRequest]) -> list[RetainResult | MemvaultError]:
        """Retain several requests, in order; one outcome per request (contract P34).

        Each request goes through the same checks, scanner and hooks as
        :meth:`retain`, and its outcome is its :class:`RetainResult` or the
        memvault error that :meth:`retain` would have raised for it: one request
        failing (over its cap, rejected by the scanner, invalid) fails alone. A
        provider that implements ``memvault_write_group`` (sqlite) commits the
        requests together, up to :data:`GROUP_SIZE` per transaction, which is
        much faster than one commit each; the others commit each request alone.
        Either way every result returned is durable when this method returns,
        and a later request sees the earlier ones (two appends to one document
        land in order). If a group's commit fails, none of its requests is
        stored and each gets that error (an error that rested on the group's
        earlier requests, over the cap because of them, would be false once
        they are rolled back), but for a request refused on its own
        (:class:`InvalidRequest`, :class:`NotSupported`, :class:`Unauthorized`),
        which keeps its error.
        A provider that takes a whole list (``memvault_retain_many``: the
        ``http-remote`` client, one request per batch) gets it only while it is
        the only plugin implementing or wrapping ``memvault_retain`` and that
        hook, so every cross-cutting plugin still sees every retain.

        :raises InvalidRequest: when an item is not a :class:`RetainRequest`
            (before anything is written).
        """
        requests = list(requests)  # also a generator, read once
        for request in requests:
            _expect(request, RetainRequest)
        checked: list[RetainRequest | MemvaultError] = []
        for request in requests:
            try:
                checked.append(self._over_time(request))
            except MemvaultError as exc:  # refused on its own (P34): the others go on
                checked.append(exc)
        try:
            done = iter(self._retain_list([r for r in checked if isinstance(r, RetainRequest)]))
            return [next(done) if isinstance(r, RetainRequest) else r for r in checked]
        finally:
            if self.embedding is not None:
                self.embedding.notify()

    def _retain_list(self, requests: list[RetainRequest]) -> list[RetainResult | MemvaultError]:
        if self._provides("memvault_retain_many") and self._provider_alone("memvault_retain", "memvault_retain_many"):
            return self._retain_at_once(requests)
        hook = self._hook.memvault_write_group
        grouped = self._provides("memvault_write_group")
        outcomes: list[RetainResult | MemvaultError] = []
        for start in range(0, len(requests), GROUP_SIZE):
            chunk = requests[start : start + GROUP_SIZE]
            if not grouped:
                outcomes.extend(self._outcome(request) for request in chunk)
                continue
            group = self._call_bare(hook, "retain")
            if group is None:
                outcomes.extend(self._outcome(request) for request in chunk)
                continue
            first = len(outcomes)
            try:
                with group:
                    outcomes.extend(self._outcome(request) for request in chunk)
            except MemvaultError as exc:
                failed: MemvaultError = _named(exc, self.name)
            except Exception as exc:  # noqa: BLE001 - a provider bug in its commit, typed like any other
                failed = _wrap(exc, self.name, "retain")
                failed.__cause__ = exc
            else:
                continue
            # The commit failed: nothing of the group is stored, so no success stands, and neither does
            # an error that may rest on the group's rolled-back requests (over the cap, or rejected as
            # the end of a split injection, because of earlier items): only one refused on its own does.
            done = outcomes[first:]
            del outcomes[first:]
            outcomes.extend(o if isinstance(o, (InvalidRequest, NotSupported, Unauthorized)) else failed for o in done)
            outcomes.extend(failed for _ in range(len(chunk) - len(done)))
        return outcomes

    @property
    def writes_in_groups(self) -> bool:
        """Whether :meth:`retain_many` commits several requests per transaction (the provider has a write group)."""
        return self._provides("memvault_write_group")

    def _provides(self, hook_name: str) -> bool:
        return any(impl.plugin is self.provider for impl in getattr(self._hook, hook_name).get_hookimpls())

    def _provider_alone(self, *hook_names: str) -> bool:
        """Whether the provider is the only plugin implementing (or wrapping) each of these hooks."""
        return all(
            impl.plugin is self.provider for name in hook_names for impl in getattr(self._hook, name).get_hookimpls()
        )

    def _retain_at_once(self, requests: list[RetainRequest]) -> list[RetainResult | MemvaultError]:
        """``retain_many`` through the provider's own ``memvault_retain_many``, 64 requests per call."""
        outcomes: list[RetainResult | MemvaultError] = []
        for start in range(0, len(requests), GROUP_SIZE):
            chunk = requests[start : start + GROUP_SIZE]
            try:
                found = self._hook.memvault_retain_many(requests=chunk)
            except MemvaultError as exc:
                named = _named(exc, self.name)
                outcomes.extend(named for _ in chunk)
                continue
            except Exception as exc:  # noqa: BLE001 - a provider bug, typed like any other
                wrapped = _wrap(exc, self.name, "retain")
                wrapped.__cause__ = exc
                outcomes.extend(wrapped for _ in chunk)
                continue
            if (
                not isinstance(found, list)
                or len(found) != len(chunk)
                or not all(type(o) is RetainResult or isinstance(o, MemvaultError) for o in found)
            ):
                bad = PluginError(
                    f"provider {self.name!r} returned {type(found).__name__} from retain_many, expected one "
                    f"RetainResult or memvault error for each of the {len(chunk)} requests"
                )
                outcomes.extend(bad for _ in chunk)
                continue
            outcomes.extend(found)
        return outcomes

    def _outcome(self, request: RetainRequest) -> RetainResult | MemvaultError:
        try:
            return self.retain(request)
        except MemvaultError as exc:
            return exc

    def _call_bare(self, caller: Any, verb: str, **kwargs: Any) -> Any:
        """``caller(**kwargs)``, its errors typed and naming the provider (P28)."""
        try:
            return caller(**kwargs)
        except MemvaultError as exc:
            named = _named(exc, self.name)
            if named is exc:
                raise
            raise named from exc
        except Exception as exc:
            raise _wrap(exc, self.name, verb) from exc

    @traced("recall")
    def recall(self, request: RecallRequest) -> RecallResult:
        """Search for lines matching the query (contract P14-P20), and by meaning when the
        vault has an embedder and the provider declares ``vectors`` (P36)."""
        _expect(request, RecallRequest)
        if self.embedding is not None and request.vector is None:
            try:
                request = attrs.evolve(request, vector=self.embedding.query_vector(request.query))
            except MemvaultError as exc:
                # An agent's memory stays available: a failing embedder costs the meaning, not the recall.
                log.warning("recall by words only: embedding the query failed: %s", exc)
        return self._call(self._hook.memvault_recall, "recall", RecallResult, request)

    # -- recall by meaning ----------------------------------------------------

    @property
    def embedder(self) -> Embedder | None:
        """The embedder this vault recalls by meaning with, or ``None`` (by words only)."""
        return self.embedding.embedder if self.embedding is not None else None

    def embedding_backlog(self) -> int:
        """How many lines wait for a vector of the vault's embedder (0 without one; P37)."""
        if self.embedding is None:
            return 0
        return int(self._call_bare(self.embedding.backlog, "vectors"))

    def embed_pending(
        self, *, timeout: float | None = None, progress: Callable[[int, int], None] | None = None
    ) -> DrainReport | None:
        """Embed every line still waiting for a vector, now, in this thread (P37).

        ``memvault reembed`` calls it; tests call it to see recall by meaning at once.
        Resumable: an interrupted run keeps what it stored. ``None`` without an embedder.

        :param timeout: stop after this many seconds (the rest stays pending).
        :param progress: called with ``(embedded so far, backlog at the start)`` after each batch.
        """
        if self.embedding is None:
            return None
        report: DrainReport = self._call_bare(self.embedding.drain, "vectors", timeout=timeout, progress=progress)
        return report

    @traced("read")
    def read(self, request: ReadRequest) -> ReadResult:
        """Read one whole document (contract P21)."""
        _expect(request, ReadRequest)
        return self._call(self._hook.memvault_read, "read", ReadResult, request)

    @traced("forget")
    def forget(self, request: ForgetRequest) -> ForgetResult:
        """Remove a document by label or by data subject (contract P22-P24)."""
        _expect(request, ForgetRequest)
        result = self._call(self._hook.memvault_forget, "forget", ForgetResult, request)
        if self.embedding is not None:
            self.embedding.notify()
        return result

    @traced("list_documents")
    def list_documents(self, request: ListDocumentsRequest) -> ListDocumentsResult:
        """Enumerate stored documents, without bodies (contract P32; optional hook).

        :raises NotSupported: naming the provider when it does not implement
            ``memvault_list_documents``.
        """
        _expect(request, ListDocumentsRequest)
        hook = self._hook.memvault_list_documents
        if not any(impl.plugin is self.provider for impl in hook.get_hookimpls()):
            raise NotSupported(
                f"provider {self.name!r} cannot enumerate its documents (it does not implement "
                "memvault_list_documents): use a provider with the 'list_documents' capability"
            )
        return self._call(hook, "list_documents", ListDocumentsResult, request)

    # -- lifecycle phases (called by memvault.lifecycle for this vault's slots) ---

    @traced("turn.started")
    def recall_turn_started(self, ctx: LifecycleContext) -> object:
        """The slot's ``turn.started`` recall (L6): a :class:`RecallOutcome`, a mapping, or ``None``."""
        return self._hook.memvault_recall_turn_started(ctx=ctx)

    @traced("compaction.completed")
    def recall_compaction_completed(self, ctx: LifecycleContext) -> object:
        """The slot's ``compaction.completed`` recall (L9), shaped like :meth:`recall_turn_started`'s."""
        return self._hook.memvault_recall_compaction_completed(ctx=ctx)

    @traced("turn.completed")
    def capture_turn_completed(self, ctx: LifecycleContext) -> object:
        """The slot's ``turn.completed`` capture (L8)."""
        return self._hook.memvault_capture_turn_completed(ctx=ctx)

    @traced("compaction.requested")
    def capture_compaction_requested(self, ctx: LifecycleContext) -> object:
        """The slot's ``compaction.requested`` capture (L9)."""
        return self._hook.memvault_capture_compaction_requested(ctx=ctx)

    def tools(self, ctx: LifecycleContext) -> object:
        """The slot's model-facing tools (L12): a list of :class:`Tool`, or ``None``."""
        return self._hook.memvault_tools(ctx=ctx)

    # -- memory over time (P41-P45) --------------------------------------------

    def sweep_expired(
        self,
        *,
        dry_run: bool = False,
        progress: Callable[[int], None] | None = None,
        batch: int = 1000,
    ) -> SweepReport:
        """Remove what has expired (P43): documents past their expiry or their tier's retention, expired
        quarantine copies, and idempotency keys older than the idempotency window.

        The provider removes up to ``batch`` documents per call, as erasure does; this loops
        until none is left. ``dry_run`` removes nothing and lists what would go (at most
        :data:`~memvault.contract.retention.MAX_SWEEP_LIMIT` documents). ``progress`` is called
        with the number of documents removed so far after each batch.

        :raises NotSupported: naming the provider when it stores no expiries.
        """
        if not self._provides("memvault_sweep_expired"):
            raise NotSupported(
                f"provider {self.name!r} stores no expiries (it does not implement memvault_sweep_expired): "
                "there is nothing to sweep; use a provider with the 'expiry' capability"
            )
        started = time.perf_counter()
        documents: list[DocumentInfo] = []
        copies = keys = 0
        truncated = False
        while True:
            now = clock.now()
            request = SweepRequest(
                now=now,
                retention=self.retention,
                keys_before=now - self.idempotency_window,
                dry_run=dry_run,
                limit=MAX_SWEEP_LIMIT if dry_run else max(1, min(batch, MAX_SWEEP_LIMIT)),
            )
            result = self._call(self._hook.memvault_sweep_expired, "sweep_expired", SweepResult, request)
            documents += result.documents
            copies += result.quarantine_removed
            keys += result.keys_removed
            if progress is not None:
                progress(len(documents))
            if dry_run:
                truncated = result.more
                break
            if not result.more or not result.documents:  # nothing removed: never loop for ever
                break
        if documents and not dry_run and self.embedding is not None:
            self.embedding.notify()
        return SweepReport(
            documents=documents,
            quarantine_removed=copies,
            keys_removed=keys,
            dry_run=dry_run,
            truncated=truncated,
            seconds=time.perf_counter() - started,
        )

    def describe_retention(self) -> list[tuple[str, str, str]]:
        """``(workspace or "(default)", tier, duration)`` rows of the policy, then the sweep's and keys' settings."""
        rows = self.retention.describe()
        rows.append(("(vault)", "sweep_interval", format_duration(self.sweep_interval)))
        rows.append(("(vault)", "idempotency.window", format_duration(self.idempotency_window)))
        return rows

    # -- quarantine copies (P30; the scanner keeps them, operators read them) -----

    def quarantine_keep(self, record: QuarantineRecord) -> bool:
        """Ask the provider to keep a quarantine copy; ``False`` when it keeps none."""
        return bool(self._quarantine("memvault_quarantine_keep", record=record))

    def quarantine_list(self, workspace_id: str) -> list[QuarantineRecord]:
        """The quarantine copies kept for ``workspace_id``, oldest first.

        :raises NotSupported: when the provider keeps no quarantine copies.
        """
        found = self._quarantine("memvault_quarantine_list", workspace_id=workspace_id)
        return sorted(found or [], key=lambda r: r.created_at)

    def quarantine_get(self, workspace_id: str, sha256: str) -> QuarantineRecord | None:
        """The quarantine copy of the body with this sha256, or ``None``.

        :raises NotSupported: when the provider keeps no quarantine copies.
        """
        found = self._quarantine("memvault_quarantine_get", workspace_id=workspace_id, sha256=sha256)
        return found if isinstance(found, QuarantineRecord) else None

    def quarantine_delete(self, workspace_id: str, sha256: str) -> int:
        """Delete the quarantine copies of the body with this sha256; how many went (0: none kept).

        :raises NotSupported: when the provider keeps no quarantine copies, or keeps
            them but cannot delete one (it does not implement ``memvault_quarantine_delete``).
        """
        validate_identifier(workspace_id, "workspace_id")
        validate_sha256(sha256, "sha256")
        if not any(impl.plugin is self.provider for impl in self._hook.memvault_quarantine_delete.get_hookimpls()):
            raise NotSupported(
                f"provider {self.name!r} cannot delete quarantine copies (it does not implement "
                "memvault_quarantine_delete): delete the copy in its storage by hand (see docs/operators/quarantine.md)"
            )
        deleted = self._quarantine("memvault_quarantine_delete", workspace_id=workspace_id, sha256=sha256)
        return deleted if isinstance(deleted, int) and not isinstance(deleted, bool) else 0

    def _quarantine(self, hook_name: str, **kwargs: Any) -> Any:
        caller = getattr(self._hook, hook_name)
        if not caller.get_hookimpls():
            raise NotSupported(
                f"provider {self.name!r} keeps no quarantine copies (it lacks the 'quarantine' capability); "
                "use a provider that has it, e.g. sqlite or local-disk"
            )
        try:
            return caller(**kwargs)
        except MemvaultError:
            raise
        except Exception as exc:
            raise _wrap(exc, self.name, hook_name.removeprefix("memvault_")) from exc

    def health_probe(self) -> HealthStatus:
        """The provider's health probe with what the vault adds to it (the embedding backlog), in the caller's
        thread and without a deadline: for a caller that keeps a deadline of its own (``memvault serve``
        probes in a thread under ``health_timeout``). :meth:`health` is this under :attr:`health_timeout`.

        Raises what the provider's probe raises; a probe that answers anything but a ``HealthStatus`` is
        reported unhealthy.
        """
        status = self._hook.memvault_health()
        if not isinstance(status, HealthStatus):
            return HealthStatus(
                ok=False, message=f"provider {self.name!r} returned {type(status).__name__} from health"
            )
        if self.embedding is not None and status.ok:
            status = attrs.evolve(status, embedding_backlog=self.embedding_backlog())
        return status

    @traced("health")
    def health(self) -> HealthStatus:
        """Probe the provider under a hard deadline; never raises, never blocks past it (P25-P27)."""
        outcome: list[HealthStatus] = []

        def probe() -> None:
            try:
                status = self.health_probe()
            except Exception as exc:  # noqa: BLE001 - health reports, never raises
                status = HealthStatus(ok=False, message=f"health check failed: {type(exc).__name__}: {exc}")
            outcome.append(status)
            done.set()

        done = threading.Event()
        # A daemon thread, not a pool: a probe that hangs forever must not keep
        # the process alive at exit or starve later probes.
        threading.Thread(target=probe, name=f"memvault-health-{self.name}", daemon=True).start()
        if done.wait(self.health_timeout) and outcome:
            return outcome[0]
        return HealthStatus(ok=False, message="health check timeout")

    def _call(self, caller: Any, verb: str, result_type: type[_R], request: object) -> _R:
        result = self._call_bare(caller, verb, request=request)
        if type(result) is not result_type:
            raise PluginError(
                f"provider {self.name!r} returned {type(result).__name__} from {verb}, expected {result_type.__name__}"
            )
        return result

    # -- lifetime ------------------------------------------------------------

    def close(self) -> None:
        """Release the provider's resources (connections, file handles). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.close()
        if self.embedding is not None:
            self.embedding.close()
        close = getattr(self.provider, "close", None)
        if callable(close):
            try:
                close()
            except MemvaultError:
                raise
            except Exception as exc:
                raise _wrap(exc, self.name, "close") from exc

    def __enter__(self) -> Vault:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Vault provider={self.name!r}>"


def _expect(request: object, cls: type) -> None:
    if type(request) is not cls:
        raise InvalidRequest(
            f"expected a memvault.{cls.__name__}, got {type(request).__name__}: build the request "
            f"with memvault.{cls.__name__}(...)",
            field="request",
        )


class AsyncVault:
    """The same verbs as :class:`Vault`, awaitable; each call runs in a worker thread.

    Use as ``async with memvault.open_async("sqlite", path="m.db") as vault:``.
    """

    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    @property
    def name(self) -> str:
        return self.vault.name

    @property
    def capabilities(self) -> frozenset[str]:
        return self.vault.capabilities

    async def retain(self, request: RetainRequest) -> RetainResult:
        """Awaitable :meth:`Vault.retain`."""
        return await asyncio.to_thread(self.vault.retain, request)

    async def retain_many(self, requests: Sequence[RetainRequest]) -> list[RetainResult | MemvaultError]:
        """Awaitable :meth:`Vault.retain_many` (one worker thread for the whole list)."""
        return await asyncio.to_thread(self.vault.retain_many, requests)

    async def recall(self, request: RecallRequest) -> RecallResult:
        """Awaitable :meth:`Vault.recall`."""
        return await asyncio.to_thread(self.vault.recall, request)

    async def read(self, request: ReadRequest) -> ReadResult:
        """Awaitable :meth:`Vault.read`."""
        return await asyncio.to_thread(self.vault.read, request)

    async def forget(self, request: ForgetRequest) -> ForgetResult:
        """Awaitable :meth:`Vault.forget`."""
        return await asyncio.to_thread(self.vault.forget, request)

    async def list_documents(self, request: ListDocumentsRequest) -> ListDocumentsResult:
        """Awaitable :meth:`Vault.list_documents`."""
        return await asyncio.to_thread(self.vault.list_documents, request)

    async def health(self) -> HealthStatus:
        """Awaitable :meth:`Vault.health`, under the same deadline."""
        return await asyncio.to_thread(self.vault.health)

    async def sweep_expired(self, *, dry_run: bool = False) -> SweepReport:
        """Awaitable :meth:`Vault.sweep_expired` (P43)."""
        return await asyncio.to_thread(self.vault.sweep_expired, dry_run=dry_run)

    async def aclose(self) -> None:
        """Close the provider."""
        await asyncio.to_thread(self.vault.close)

    async def __aenter__(self) -> AsyncVault:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def open(  # noqa: A001 - mirrors the builtin on purpose: memvault.open(...)
    name: str,
    /,
    *,
    health_timeout: float | None = None,
    scanner: str | None = None,
    scan: Mapping[str, Any] | None = None,
    plugins: Iterable[object] = (),
    embedder: str | Embedder | None = None,
    embed: Mapping[str, Any] | None = None,
    background_embedding: bool = True,
    retention: RetentionPolicy | Mapping[str, Any] | None = None,
    idempotency: Mapping[str, Any] | None = None,
    background_sweep: bool = True,
    **settings: Any,
) -> Vault:
    """Open the installed provider ``name`` with its ``settings``.

    :param name: a provider name from ``memvault providers``.
    :param health_timeout: the health deadline in seconds.
    :param scanner: ``"builtin"`` (the prompt-injection scanner), ``"off"``, or the
        name of a scanner another plugin registers. The default (``None``) is
        ``"builtin"``, except ``"off"`` for a ``remote`` provider: the service it
        talks to scans every write and read itself, and a client-side scanner
        would fetch each hit's document over the network to scan it again.
    :param scan: the builtin scanner's policy, as the ``[scan]`` table of ``memvault.toml``
        (``{"thresholds": {category: number}, "allow": [pattern ids]}``); validated
        whatever the scanner, applied to ``"builtin"``.
    :param plugins: extra cross-cutting plugins for this vault.
    :param embedder: recall by meaning (contract P36): ``"auto"`` (the default, ``None``:
        ``MEMVAULT_EMBEDDER`` if set, else the only installed embedder, or none when none is
        installed), ``"off"``, an embedder's name, or an embedder object (a
        :class:`memvault.Embedder`). Used only when the provider declares ``vectors``; a
        remote provider's service embeds on its side.
    :param embed: the embedder's own settings (the ``[embed]`` table's other keys).
    :param background_embedding: embed new lines in a background thread (default ``True``).
    :param retention: the retention policy (contract P43): a
        :class:`~memvault.contract.retention.RetentionPolicy`, or the ``[retention]`` table of
        ``memvault.toml`` as a mapping (``{"daily": "90d", "sweep_interval": "1h",
        "workspaces": {"acme": {"daily": "30d"}}}``). Needs a provider with ``expiry``.
    :param idempotency: the ``[idempotency]`` table (``{"window": "24h"}``, P45).
    :param background_sweep: sweep expired content in a background thread every
        ``sweep_interval`` (default ``True``; the CLI's short-lived commands pass ``False``).
    :param settings: the provider's own settings (``path=...`` for sqlite).
    :raises ProviderNotFound: listing the installed providers.
    :raises InvalidRequest: for a setting the provider does not take, or a required
        one (a factory parameter without a default) that is missing.
    """
    interval: _dt.timedelta | None = DEFAULT_SWEEP_INTERVAL
    if isinstance(retention, RetentionPolicy):
        policy = retention
    else:
        table = dict(retention or {})
        policy, interval = RetentionPolicy.from_config(table), sweep_interval_from(table)
    window = idempotency_window_from(dict(idempotency or {}))
    registry = get_registry()
    info = registry.get(name)
    kwargs = coerce_settings(info, settings)
    missing = missing_settings(info, kwargs)
    if missing is not None:
        raise missing
    if scanner is None:
        scanner = "off" if Capability.SCANS_UPSTREAM in info.capabilities else "builtin"
    extra = [*registry.scanner(scanner, scan), *plugins]  # a bad [scan] table fails before anything opens
    embedding: Embedder | None
    if embedder is not None and not isinstance(embedder, str):
        embedding = embedder
    else:
        chosen = embedder or os.environ.get("MEMVAULT_EMBEDDER", "").strip() or "auto"
        # A provider keeping vectors recalls by meaning; the builtin scanner judges by meaning whatever
        # the provider (the model loads on first use).
        wanted = Capability.VECTORS in info.capabilities or scanner == "builtin"
        embedding = registry.embedder(chosen, embed) if wanted else None
        if chosen not in ("auto", "off") and Capability.VECTORS not in info.capabilities:
            registry.embedder(chosen, embed)  # a misspelt name or bad settings still fail loudly
    try:
        provider = info.factory(**kwargs)
    except MemvaultError:
        raise
    except Exception as exc:
        raise _wrap(exc, name, "open") from exc
    try:
        return Vault(
            provider,
            name=name,
            capabilities=info.capabilities,
            plugins=extra,
            health_timeout=health_timeout,
            embedder=embedding,
            background_embedding=background_embedding,
            retention=policy,
            idempotency_window=window,
            sweep_interval=interval,
            background_sweep=background_sweep,
        )
    except BaseException:
        close = getattr(provider, "close", None)
        if callable(close):
            close()
        raise


def open_from_config(config: str | os.PathLike[str] | None = None, **overrides: Any) -> Vault:
    """Open the provider a ``memvault.toml`` names (see :mod:`memvault.config`).

    :param config: the config file (default: ``MEMVAULT_CONFIG``, else ``./memvault.toml``
        when it exists, else the built-in defaults).
    :param overrides: provider settings that win over the file's, such as
        ``path="fresh.db"`` for sqlite. ``config`` is reserved for the file
        (no provider may take a setting of that name).
    """
    # Loaded here, not at import: the config reader pulls in cattrs, which `import memvault` need not pay for.
    from memvault.config import load_config  # same layer (the facade)

    return open_configured(load_config(config), **overrides)


def open_configured(config: Config, name: str | None = None, /, **overrides: Any) -> Vault:
    """Open provider ``name`` (default: the one ``config`` names) as a loaded config says.

    The one place that turns a :class:`memvault.config.Config` into a vault, for
    :func:`open_from_config`, the CLI and ``memvault serve``: the config's settings
    for that provider, its scanner, scan policy and health timeout.

    :param overrides: provider settings that win over the config's; ``scanner``,
        ``health_timeout`` and ``plugins`` among them go to :func:`open` instead.
    """
    name = name or config.provider
    configure_telemetry(config.telemetry)
    settings: dict[str, Any] = dict(config.providers.get(name, {}))
    settings.update(overrides)
    embed = dict(config.embed)
    vault_options: dict[str, Any] = {
        "scanner": config.scanner,
        "scan": config.scan,
        "health_timeout": config.health_timeout,
        "embedder": embed.pop("embedder", None),
        "embed": embed,
        "retention": config.retention,
        "idempotency": config.idempotency,
    }
    for key in ("scanner", "health_timeout", "plugins", "embedder", "background_embedding", "background_sweep"):
        if key in settings:
            vault_options[key] = settings.pop(key)
    return open(name, **vault_options, **settings)


def open_async(name: str, /, **kwargs: Any) -> AsyncVault:
    """Like :func:`open`, for asyncio code: ``async with memvault.open_async(...) as v:``."""
    return AsyncVault(open(name, **kwargs))


def settings_from_pairs(pairs: Iterable[str]) -> Mapping[str, str]:
    """Parse ``key=value`` strings (the CLI's ``--option``)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidRequest(f"option {pair!r} is not key=value: write it as --option key=value", field="option")
        out[key.strip()] = value
    return out
