"""The memvault service: an ASGI application (Starlette) exposing one vault over JSON.

Routes (all under ``/v1``; bodies and results are the :mod:`memvault.contract.wire` shapes):

=========================  ======  =====================================================
``/v1/retain``             POST    :class:`~memvault.RetainRequest` -> ``RetainResult``
``/v1/retain/batch``       POST    ``{"items": [RetainRequest, ...]}`` -> ``{"results": [...]}`` (one outcome each)
``/v1/recall``             POST    :class:`~memvault.RecallRequest` -> ``RecallResult``
``/v1/read``               POST    :class:`~memvault.ReadRequest` -> ``ReadResult``
``/v1/forget``             POST    :class:`~memvault.ForgetRequest` -> ``ForgetResult``
``/v1/health``             GET     ``HealthStatus``; no token needed, nothing about tenants
``/v1/capabilities``       GET     the provider's name and capabilities; ``recall_by_meaning`` (embedder or null)
``/v1/documents/list``     POST    :class:`~memvault.ListDocumentsRequest` -> ``ListDocumentsResult``
``/v1/quarantine/keep``    POST    ``QuarantineRecord`` -> ``{"kept": bool}``
``/v1/quarantine/list``    POST    ``{"workspace_id"}`` -> ``{"records": [...] | null}``
``/v1/quarantine/get``     POST    ``{"workspace_id", "sha256"}`` -> ``{"record": ... | null}``
``/v1/openapi.json``       GET     the OpenAPI 3.1 document
``/metrics``               GET     Prometheus metrics (a token unless ``server.metrics_public``; :mod:`.metrics`)
=========================  ======  =====================================================

Order of checks on a verb: concurrency bounds (503: the service's total, then
the caller's own: per token, per peer without tokens, or the shared bound of
clients without a valid token), bearer token (401), body size while streaming
(413) and its arrival time (408, ``body_timeout``), JSON shape and text (400: a
number too long to convert or a lone surrogate is malformed input too), the
token's workspace binding (403, before the store is touched, so the answer never
depends on whether the workspace exists), the core's validation (400), then the
provider under the per-request timeout (504).

``GET /v1/health`` never waits behind those bounds: it answers from a probe of
the provider that runs at most once per ``health_interval`` in its own thread,
so a flood of health checks costs the store one probe per interval, and a busy
service still reports the store's real state. Unknown paths (404), wrong
methods (405) and malformed HTTP (400) answer with the same typed error body.

``POST /v1/retain/batch`` (contract P34 over the wire) takes 1 to
:attr:`ServerSettings.batch_items_limit` retain requests (``max_batch_items``,
and no more than the caller may have in flight) and runs them with one
:meth:`Vault.retain_many` call in one worker thread. Whole-batch checks, in
order: the bounds and the token as above, the body (413/408/400), its shape
(400: an object whose ``items`` is a list of 1 to ``max_batch_items``; 400 too
for more items than the caller's bound or the service's total, since such a
batch could never be let in), then the bounds again for the batch's size: a
batch of ``n`` items counts ``n`` requests against the caller's bound and the
service's total (503 when they do not fit beside the caller's other requests),
so batches cannot multiply what one tenant has in flight. Then each item is
checked like a ``/v1/retain`` body (text, shape, the token's workspace, the
core's validation) and fails alone. The valid items run in one ``retain_many``
call, or, for ``"independent": true`` on a provider without a write group, each
on its own worker thread at once. The answer is 200 with one entry per item, in order, ``{"result": RetainResult}`` or
``{"status": <the single route's status>, "error": <its typed error body>}``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread
from attrs import field, frozen
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Scope

from memvault.contract.errors import (
    InvalidRequest,
    MemvaultError,
    NotSupported,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
)
from memvault.contract.models import (
    ForgetRequest,
    HealthStatus,
    ListDocumentsRequest,
    QuarantineRecord,
    ReadRequest,
    RecallRequest,
    RetainRequest,
    RetainResult,
    validate_identifier,
    validate_sha256,
)
from memvault.contract.wire import structure, unstructure
from memvault.vault import Vault
from memvault_http_remote.console import CONSOLE_PREFIX, console_parts
from memvault_http_remote.errorwire import encode_error, status_for
from memvault_http_remote.limits import (
    Admission,
    HttpRefusal,
    ProviderCalls,
    RequestGate,
    json_body,
    read_body,
    refusal_response,
)
from memvault_http_remote.metrics import METRICS_PATH, ServiceMetrics, metrics_endpoint
from memvault_http_remote.openapi import openapi_document
from memvault_http_remote.settings import ServerSettings, TokenEntry, TokenStore

__all__ = ["create_app"]

log = logging.getLogger("memvault.serve")

_T = TypeVar("_T")
API_PREFIX: Final = "/v1"


_HttpError = HttpRefusal
_error_response = refusal_response


def _workspace(instance: object, attribute: Any, value: Any) -> None:
    validate_identifier(value, attribute.name)


def _digest(instance: object, attribute: Any, value: Any) -> None:
    validate_sha256(value, attribute.name)


@frozen(kw_only=True)
class _QuarantineList:
    workspace_id: str = field(validator=_workspace)


@frozen(kw_only=True)
class _QuarantineGet:
    workspace_id: str = field(validator=_workspace)
    sha256: str = field(validator=_digest)


def _check_text(data: object) -> None:
    """400 for a lone surrogate anywhere in the body: JSON may escape one, no store can hold it.

    Iterative, so a body nested as deeply as the JSON parser allows cannot exhaust the stack.
    """
    pending: list[tuple[object, str]] = [(data, "")]
    while pending:
        value, path = pending.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise _HttpError(
                    400,
                    InvalidRequest(
                        f"{path or 'a key'} is not valid UTF-8 (it holds a lone surrogate such as \\ud800): "
                        "send real text",
                        field=path,
                    ),
                ) from None
        elif isinstance(value, dict):
            for key, item in value.items():
                pending.append((key, path))
                pending.append((item, f"{path}.{key}" if path else str(key)))
        elif isinstance(value, list):
            pending.extend((item, f"{path}[{index}]") for index, item in enumerate(value))


class _HealthCache:
    """The provider's health, probed at most once per ``interval`` in a thread of its own.

    Every caller within the interval gets the same answer; a stale answer starts
    one probe (never two at once) and waits for it briefly. While a probe is slow,
    callers get the previous answer until the probe has run for ``timeout``
    seconds, then ``ok: false`` saying the probe does not answer.
    """

    #: How long a request waits for a fresh probe when a previous answer exists.
    WAIT: Final = 0.5

    def __init__(self, probe: Callable[[], HealthStatus], interval: float, timeout: float) -> None:
        self.probe = probe
        self.interval = interval
        self.timeout = timeout
        self.status: HealthStatus | None = None
        self.at = -math.inf
        self.running: asyncio.Future[HealthStatus] | None = None
        self.started = 0.0

    def _run(self) -> HealthStatus:
        try:
            status = self.probe()
        except Exception as exc:  # a probe that raises is an unhealthy store
            log.error("health probe failed: %s", exc, exc_info=exc)
            return HealthStatus(ok=False, message=f"the provider's health probe failed: {type(exc).__name__}")
        if not isinstance(status, HealthStatus):
            return HealthStatus(ok=False, message="the provider's health probe returned no status")
        return status

    def _done(self, future: asyncio.Future[HealthStatus]) -> None:
        self.running = None
        if not future.cancelled() and future.exception() is None:
            self.status = future.result()
            self.at = time.monotonic()

    async def get(self) -> HealthStatus:
        now = time.monotonic()
        if self.status is not None and now - self.at < self.interval:
            return self.status
        if self.running is None:
            self.started = now
            self.running = asyncio.get_running_loop().run_in_executor(None, self._run)
            self.running.add_done_callback(self._done)
        wait = self.WAIT if self.status is not None else self.timeout
        try:
            return await asyncio.wait_for(asyncio.shield(self.running), timeout=wait)
        except asyncio.TimeoutError:
            pass
        running_for = time.monotonic() - self.started
        if self.status is not None and running_for < self.timeout:
            return self.status
        return HealthStatus(
            ok=False,
            message=f"the provider's health probe has not answered for {running_for:.1f} s: "
            "the store is hanging or overloaded; check the service log",
        )


class _Service:
    def __init__(self, vault: Vault, settings: ServerSettings, tokens: TokenStore) -> None:
        self.vault = vault
        self.settings = settings
        self.tokens = tokens
        # Threads, not the event loop, run the (synchronous) provider; bounded
        # like the requests so a flood cannot spawn unbounded threads. A call holds
        # its token until its thread returns, also after its request gave up (504).
        self.provider_calls = ProviderCalls(settings, log=log)
        #: The outermost layer (set by :func:`create_app`): a batch takes its extra slots from it.
        self.gate: RequestGate | None = None
        # The vault's probe (the provider's hook and the embedding backlog) under the service's own deadline
        # (health_timeout): the vault's in-process deadline (0.2 s) would read a busy process as a failing store.
        self.health_next = 0.0
        self.health_cache = _HealthCache(vault.health_probe, settings.health_interval, settings.health_timeout)

    # -- checks ----------------------------------------------------------------

    def authenticate(self, request: Request) -> TokenEntry | None:
        """The caller's token entry; ``None`` when the service runs without tokens."""
        if not self.tokens:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise _HttpError(
                401,
                Unauthorized("a bearer token is required: send 'Authorization: Bearer <token>'"),
                {"WWW-Authenticate": "Bearer"},
            )
        entry = self.tokens.lookup(token)
        if entry is None:
            raise _HttpError(
                401,
                Unauthorized("the bearer token is not recognised: check it, or ask the operator for a new one"),
                {"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        request.scope.setdefault("memvault", {})["token"] = entry.name or "unnamed"
        return entry

    async def read_json(self, request: Request, *, check_text: bool = True) -> dict[str, Any]:
        """The JSON object in the body, refusing bodies over the cap as they stream in.

        :param check_text: refuse a lone surrogate anywhere in the body (400); a batch
            checks each item on its own instead, so one bad item fails alone.
        """
        body = await read_body(
            request.receive,
            request.scope.get("headers", ()),
            max_bytes=self.settings.max_body_bytes,
            timeout=self.settings.body_timeout,
            prefix="server",
        )
        data = json_body(body)
        if check_text:
            _check_text(data)
        if not isinstance(data, dict):
            raise _HttpError(
                400,
                InvalidRequest(f"request body must be a JSON object, got {type(data).__name__}", field="body"),
            )
        return data

    def authorize(self, entry: TokenEntry | None, data: dict[str, Any]) -> None:
        """403 when the token is not bound to the body's workspace. The store is not consulted."""
        workspace = data.get("workspace_id")
        if entry is None or not isinstance(workspace, str):
            return  # no auth configured, or the core will reject the missing/bad id
        if not entry.allows(workspace):
            raise _HttpError(
                403,
                Unauthorized(
                    "this token is not allowed on the requested workspace: use a token bound to it, "
                    "or ask the operator to extend this token's workspaces"
                ),
            )

    async def call(self, scope: Scope, func: Callable[[], _T]) -> _T:
        """Run the provider in a worker thread under the per-request timeout (504 past it).

        :class:`~memvault_http_remote.limits.ProviderCalls`: a call the request gives up
        on runs on to its end, keeping its thread and the request's gate slots until it
        returns; while they hold the slots, new requests get the gate's 503.
        """
        try:
            return await self.provider_calls.run(scope, func)
        except UpstreamTimeout as exc:
            raise _HttpError(504, exc) from None

    # -- handlers --------------------------------------------------------------

    def verb(self, cls: type[Any], method: Callable[[Any], Any]) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            entry = self.authenticate(request)
            data = await self.read_json(request)
            self.authorize(entry, data)
            parsed = structure(data, cls, what="request body")
            result = await self.call(request.scope, lambda: method(parsed))
            return JSONResponse(unstructure(result))

        return handler

    async def retain_batch(self, request: Request) -> Response:
        """``POST /v1/retain/batch``: 1..``max_batch_items`` retains, one outcome each, in order.

        The batch's items past its first take slots of their own from the gate
        (503 when they do not fit). The gate gives them back with the request's
        own, whatever happens (an error, the timeout, the caller leaving), once
        the batch is answered and its provider calls have returned.
        """
        entry = self.authenticate(request)
        data = await self.read_json(request, check_text=False)
        items = self.batch_items(data, request.scope)
        request.scope.setdefault("memvault", {})["items"] = len(items)
        extra = len(items) - 1
        if self.gate is not None and extra:
            self.gate.reserve(request.scope, extra)
        independent = bool(data.get("independent", False))
        return JSONResponse({"results": await self.run_batch(request.scope, entry, items, independent=independent)})

    def batch_items(self, data: dict[str, Any], scope: Scope | None = None) -> list[Any]:
        """The batch's ``items``: 400 for anything but a list of 1 to ``max_batch_items`` entries,
        and for more items than the caller may ever have in flight (a batch that could never be let in)."""
        items = data.get("items")
        # The items are checked one by one below (one bad item fails alone); the rest of the body here.
        _check_text({key: None if key == "items" and isinstance(value, list) else value for key, value in data.items()})
        unknown = sorted(key for key in data if key not in ("items", "independent"))
        if unknown:
            raise _HttpError(
                400,
                InvalidRequest(
                    f"unknown key(s) {', '.join(unknown)} in request body: a batch is "
                    '{"items": [<retain request>, ...], "independent": <optional bool>}',
                    field=unknown[0],
                ),
            )
        if not isinstance(items, list) or not items:
            got = (
                "missing"
                if "items" not in data
                else "an empty list"
                if isinstance(items, list)
                else "null"
                if items is None
                else type(items).__name__
            )
            raise _HttpError(
                400,
                InvalidRequest(
                    f"items must be a non-empty list of retain requests (got {got}): send "
                    '{"items": [<the body of a /v1/retain request>, ...]}',
                    field="items",
                ),
            )
        if not isinstance(data.get("independent", False), bool):
            raise _HttpError(
                400,
                InvalidRequest(
                    f"independent must be true or false, got {type(data['independent']).__name__}",
                    field="independent",
                ),
            )
        cap = self.settings.max_batch_items
        if len(items) > cap:
            raise _HttpError(
                400,
                InvalidRequest(
                    f"items holds {len(items)} retain requests, over the service's limit of {cap} per batch "
                    f"(server.max_batch_items): send at most {cap} per batch",
                    field="items",
                ),
            )
        if scope is not None:
            scope.setdefault("memvault", {})["items"] = len(items)
        bound, setting = (
            self.gate.batch_cap(scope) if self.gate is not None and scope is not None else (cap, "max_batch_items")
        )
        if len(items) > bound:
            # Each item counts as a request in flight: this many can never be let in at once, so a 503
            # with Retry-After would have the client retry for ever.
            raise _HttpError(
                400,
                InvalidRequest(
                    f"items holds {len(items)} retain requests, and each counts as one request in flight: over "
                    f"the limit of {bound} this caller may ever have in flight (server.{setting}), so this batch "
                    f"can never be let in: send at most {bound} per batch (the service's OpenAPI document states "
                    f"the limit), or ask the operator to raise server.{setting}",
                    field="items",
                ),
            )
        return items

    async def run_batch(
        self, scope: Scope, entry: TokenEntry | None, items: list[Any], *, independent: bool = False
    ) -> list[dict[str, Any]]:
        """Each item checked like a ``/v1/retain`` body, then every valid one in one ``retain_many`` call.

        Independent items (``"independent": true``: the client's coalesced appends) on a provider that
        commits each retain alone run at once, each on its own worker thread, as separate requests would:
        one after the other they would pay one commit each in turn.
        """
        outcomes: list[dict[str, Any]] = []
        parsed: list[RetainRequest] = []
        positions: list[int] = []
        for index, item in enumerate(items):
            try:
                _check_text(item)
                if not isinstance(item, dict):
                    raise _HttpError(
                        400,
                        InvalidRequest(
                            f"items[{index}] must be a JSON object (a retain request), got {type(item).__name__}",
                            field="body",
                        ),
                    )
                self.authorize(entry, item)
                parsed.append(structure(item, RetainRequest, what=f"items[{index}]"))
            except _HttpError as exc:
                outcomes.append({"status": exc.status, **encode_error(exc.error)})
                continue
            except MemvaultError as exc:
                outcomes.append(_item_failure(exc, index))
                continue
            positions.append(len(outcomes))
            outcomes.append({})
        if parsed and independent and len(parsed) > 1 and not self.vault.writes_in_groups:
            results = await self.retain_each(scope, parsed)
        elif parsed:
            results = await self.call(scope, lambda: self.vault.retain_many(parsed))
        if parsed:
            for position, outcome in zip(positions, results, strict=True):
                outcomes[position] = (
                    _item_failure(outcome, position)
                    if isinstance(outcome, MemvaultError)
                    else {"result": unstructure(outcome)}
                )
        return outcomes

    async def retain_each(self, scope: Scope, requests: list[RetainRequest]) -> list[RetainResult | MemvaultError]:
        """Each retain on its own worker thread, at once; one outcome each (a timeout is that item's 504)."""
        outcomes: list[RetainResult | MemvaultError] = [UpstreamError("not run")] * len(requests)

        def retain(request: RetainRequest) -> RetainResult | MemvaultError:
            try:
                return self.vault.retain(request)
            except MemvaultError as exc:
                return exc

        async def run(index: int, request: RetainRequest) -> None:
            try:
                outcomes[index] = await self.call(scope, lambda: retain(request))
            except _HttpError as exc:
                outcomes[index] = exc.error

        async with anyio.create_task_group() as group:
            for index, request in enumerate(requests):
                group.start_soon(run, index, request)
        return outcomes

    async def health(self, request: Request) -> Response:
        if self.tokens and request.headers.get("authorization"):
            self.authenticate(request)  # a presented token must be valid; none is fine
        await self.pace_health()
        return JSONResponse(unstructure(await self.health_cache.get()))

    async def pace_health(self) -> None:
        """Space health answers to at most ``health_rate`` a second, by waiting (never refusing).

        The answer changes once per ``health_interval``; a client asking faster only burns the
        event loop other tenants need. A waiting request costs no CPU, so a flood of clients
        that wait for their answers is slowed down. No request waits longer than
        ``_HEALTH_MAX_WAIT``: a load balancer's probe is answered within it, flood or not
        (and within the 1 s health deadline of the http-remote client).
        """
        now = time.monotonic()
        slot = min(max(now, self.health_next), now + _HEALTH_MAX_WAIT)
        self.health_next = slot + 1.0 / self.settings.health_rate
        if slot > now:
            await anyio.sleep(slot - now)

    async def capabilities(self, request: Request) -> Response:
        """The provider's name and capabilities, and how this service ranks a recall: ``recall_by_meaning``
        names the embedder it fuses meaning in with (P36: its vault has one and the provider declares
        ``vectors``), ``null`` when it recalls by words alone. A client of an older service, which sends no
        such field, reads it as by words."""
        self.authenticate(request)
        embedder = self.vault.embedder
        meaning = None if embedder is None else {"embedder": embedder.name, "model_id": embedder.model_id}
        return JSONResponse(
            {
                "provider": self.vault.name,
                "capabilities": sorted(self.vault.capabilities),
                "recall_by_meaning": meaning,
            }
        )

    async def list_documents(self, request: Request) -> Response:
        """Listing one workspace needs a token bound to it; listing every workspace needs a token for ``*``."""
        entry = self.authenticate(request)
        data = await self.read_json(request)
        workspace = data.get("workspace_id", "")
        if entry is not None and workspace == "" and "*" not in entry.workspaces:
            raise _HttpError(
                403,
                Unauthorized(
                    "listing every workspace needs a token for all workspaces ('*'): set workspace_id to "
                    "one this token may touch, or ask the operator for such a token"
                ),
            )
        self.authorize(entry, data)
        parsed = structure(data, ListDocumentsRequest, what="request body")
        result = await self.call(request.scope, lambda: self.vault.list_documents(parsed))
        return JSONResponse(unstructure(result))

    async def quarantine_keep(self, request: Request) -> Response:
        entry = self.authenticate(request)
        data = await self.read_json(request)
        self.authorize(entry, data)
        record = structure(data, QuarantineRecord, what="request body")
        kept = await self.call(
            request.scope, lambda: _unless_unsupported(lambda: self.vault.quarantine_keep(record), False)
        )
        return JSONResponse({"kept": kept is True})

    async def quarantine_list(self, request: Request) -> Response:
        entry = self.authenticate(request)
        data = await self.read_json(request)
        self.authorize(entry, data)
        query = structure(data, _QuarantineList, what="request body")
        records = await self.call(
            request.scope, lambda: _unless_unsupported(lambda: self.vault.quarantine_list(query.workspace_id), None)
        )
        return JSONResponse({"records": None if records is None else [unstructure(r) for r in records]})

    async def quarantine_get(self, request: Request) -> Response:
        entry = self.authenticate(request)
        data = await self.read_json(request)
        self.authorize(entry, data)
        query = structure(data, _QuarantineGet, what="request body")
        record = await self.call(
            request.scope,
            lambda: _unless_unsupported(lambda: self.vault.quarantine_get(query.workspace_id, query.sha256), None),
        )
        return JSONResponse({"record": None if record is None else unstructure(record)})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document(self.settings))


def _item_failure(exc: MemvaultError, index: int) -> dict[str, Any]:
    """A batch item's error entry: the single route's status and typed body (a 500's details stay in the log)."""
    status = status_for(exc)
    if status == 500:
        log.error("provider error on %s/retain/batch item %d: %s", API_PREFIX, index, exc, exc_info=exc)
        return {"status": 500, **encode_error(UpstreamError("the service's provider failed; see the service log"))}
    return {"status": status, **encode_error(exc)}


def _unless_unsupported(call: Callable[[], _T], otherwise: _T) -> _T:
    """``call()`` through the facade, or ``otherwise`` when the provider keeps no quarantine copies.

    The wire says "none kept" (``null``, ``false``) rather than an error: the
    client's vault then raises its own :class:`NotSupported`, as a local vault would.
    """
    try:
        return call()
    except NotSupported:
        return otherwise


def _guard(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Turn memvault errors into typed JSON bodies; anything else is a 500 that says little."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except _HttpError as exc:
            return _error_response(exc.status, exc.error, exc.headers)
        except ClientDisconnect:
            # The caller left before its body arrived: nothing to answer, nothing wrong with the
            # service. The answer below is never delivered; the request's log line says 400.
            return _error_response(400, InvalidRequest("the client disconnected before its body arrived", field="body"))
        except MemvaultError as exc:
            status = status_for(exc)
            if status == 500:
                log.error("provider error on %s: %s", request.url.path, exc, exc_info=exc)
                # The provider's own message may name files or hosts: keep it in the log.
                return _error_response(500, UpstreamError("the service's provider failed; see the service log"))
            return _error_response(status, exc)
        except Exception:
            log.exception("unexpected error on %s", request.url.path)
            return _error_response(500, UpstreamError("internal error in the memvault service; see its log"))

    return guarded


#: The longest a health request waits for its turn under ``health_rate`` (seconds).
_HEALTH_MAX_WAIT: Final = 0.25

#: Routes that never wait behind (nor count against) the request bounds.
_UNBOUNDED: Final = frozenset({f"{API_PREFIX}/health"})


def _exempt(scope: Scope) -> bool:
    return scope.get("path") in _UNBOUNDED


_Admission = Admission
_Gate = RequestGate


async def _http_error(request: Request, exc: Exception) -> Response:
    """404, 405 and other routing answers, with the typed error body."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"no route {request.url.path}: the service's routes are listed at {API_PREFIX}/openapi.json"
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        message = f"{request.method} is not allowed on {request.url.path}: use {allowed or 'another method'}"
    else:
        message = f"{exc.detail}"
    return _error_response(exc.status_code, InvalidRequest(message), dict(exc.headers or {}))


def create_app(vault: Vault, settings: ServerSettings | None = None, tokens: TokenStore | None = None) -> ASGIApp:
    """The ASGI application serving ``vault``.

    :param vault: the vault to expose (the caller keeps ownership and closes it).
    :param settings: limits; the defaults of :class:`ServerSettings` otherwise.
    :param tokens: the accepted tokens; with none, every request is allowed.
    """
    settings = settings or ServerSettings()
    service = _Service(vault, settings, tokens or TokenStore([]))
    console, console_session = console_parts(
        vault, settings, service.tokens, run=service.call, health=service.health_cache.get
    )
    routes = [
        Route(f"{API_PREFIX}/retain", _guard(service.verb(RetainRequest, vault.retain)), methods=["POST"]),
        Route(f"{API_PREFIX}/retain/batch", _guard(service.retain_batch), methods=["POST"]),
        Route(f"{API_PREFIX}/recall", _guard(service.verb(RecallRequest, vault.recall)), methods=["POST"]),
        Route(f"{API_PREFIX}/read", _guard(service.verb(ReadRequest, vault.read)), methods=["POST"]),
        Route(f"{API_PREFIX}/forget", _guard(service.verb(ForgetRequest, vault.forget)), methods=["POST"]),
        Route(f"{API_PREFIX}/health", _guard(service.health), methods=["GET"]),
        Route(f"{API_PREFIX}/capabilities", _guard(service.capabilities), methods=["GET"]),
        Route(f"{API_PREFIX}/documents/list", _guard(service.list_documents), methods=["POST"]),
        Route(f"{API_PREFIX}/quarantine/keep", _guard(service.quarantine_keep), methods=["POST"]),
        Route(f"{API_PREFIX}/quarantine/list", _guard(service.quarantine_list), methods=["POST"]),
        Route(f"{API_PREFIX}/quarantine/get", _guard(service.quarantine_get), methods=["POST"]),
        Route(f"{API_PREFIX}/openapi.json", _guard(service.openapi), methods=["GET"]),
        # The operator console (server-rendered pages; same tokens and workspace bounds): console.py.
        Mount(CONSOLE_PREFIX, app=console),
    ]
    metrics = ServiceMetrics(vault, health=lambda: service.health_cache.status)
    metrics_route = metrics_endpoint(
        metrics, authenticate=service.authenticate, public=settings.metrics_public, refresh=service.health_cache.get
    )
    routes.append(Route(METRICS_PATH, _guard(metrics_route), methods=["GET"]))
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    service.gate = RequestGate(
        app, settings, service.tokens, exempt=_exempt, prefix="server", log=log, session=console_session
    )
    service.provider_calls.gate = service.gate
    return metrics.observe(service.gate, app.routes)
