"""The memvault service: an ASGI application (Starlette) exposing one vault over JSON.

Routes (all under ``/v1``; bodies and results are the :mod:`memvault.wire` shapes):

=========================  ======  =====================================================
``/v1/retain``             POST    :class:`~memvault.RetainRequest` -> ``RetainResult``
``/v1/recall``             POST    :class:`~memvault.RecallRequest` -> ``RecallResult``
``/v1/read``               POST    :class:`~memvault.ReadRequest` -> ``ReadResult``
``/v1/forget``             POST    :class:`~memvault.ForgetRequest` -> ``ForgetResult``
``/v1/health``             GET     ``HealthStatus``; no token needed, nothing about tenants
``/v1/capabilities``       GET     the provider's name and declared capabilities
``/v1/documents/list``     POST    :class:`~memvault.ListDocumentsRequest` -> ``ListDocumentsResult``
``/v1/quarantine/keep``    POST    ``QuarantineRecord`` -> ``{"kept": bool}``
``/v1/quarantine/list``    POST    ``{"workspace_id"}`` -> ``{"records": [...] | null}``
``/v1/quarantine/get``     POST    ``{"workspace_id", "sha256"}`` -> ``{"record": ... | null}``
``/v1/openapi.json``       GET     the OpenAPI 3.1 document
=========================  ======  =====================================================

Order of checks on a verb: concurrency bound (503), bearer token (401), body
size while streaming (413) and its arrival time (408), JSON shape (400), the token's workspace binding
(403, before the store is touched, so the answer never depends on whether the
workspace exists), the core's validation (400), then the provider under the
per-request timeout (504).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread
from attrs import frozen
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memvault.errors import InvalidRequest, MemvaultError, Unauthorized, UpstreamError, UpstreamTimeout
from memvault.models import (
    ForgetRequest,
    ListDocumentsRequest,
    QuarantineRecord,
    ReadRequest,
    RecallRequest,
    RetainRequest,
)
from memvault.vault import Vault
from memvault.wire import structure, unstructure
from memvault_http_remote.errorwire import encode_error, status_for
from memvault_http_remote.openapi import openapi_document
from memvault_http_remote.settings import ServerSettings, TokenEntry, TokenStore

__all__ = ["create_app"]

log = logging.getLogger("memvault.serve")

_T = TypeVar("_T")
API_PREFIX: Final = "/v1"


class _HttpError(Exception):
    """Answer with ``status`` and the typed error body of ``error``."""

    def __init__(self, status: int, error: MemvaultError, headers: dict[str, str] | None = None) -> None:
        super().__init__(str(error))
        self.status = status
        self.error = error
        self.headers = headers or {}


def _error_response(status: int, error: MemvaultError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(encode_error(error), status_code=status, headers=headers)


@frozen(kw_only=True)
class _QuarantineList:
    workspace_id: str


@frozen(kw_only=True)
class _QuarantineGet:
    workspace_id: str
    sha256: str


class _Service:
    def __init__(self, vault: Vault, settings: ServerSettings, tokens: TokenStore) -> None:
        self.vault = vault
        self.settings = settings
        self.tokens = tokens
        # Threads, not the event loop, run the (synchronous) provider; bounded
        # like the requests so a flood cannot spawn unbounded threads.
        self.limiter = anyio.CapacityLimiter(settings.max_concurrent)

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

    async def read_json(self, request: Request) -> dict[str, Any]:
        """The JSON object in the body, refusing bodies over the cap as they stream in."""
        cap = self.settings.max_body_bytes
        too_large = _HttpError(
            413,
            InvalidRequest(
                f"request body is over the service's limit of {cap} bytes: send less content per call",
                field="body",
            ),
        )
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise too_large
        chunks: list[bytes] = []
        size = 0
        timeout = self.settings.request_timeout
        try:
            # A body trickling in must not hold a concurrency slot forever.
            with anyio.fail_after(timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > cap:
                        raise too_large
                    chunks.append(chunk)
        except TimeoutError:
            raise _HttpError(
                408,
                InvalidRequest(f"the request body did not arrive within {timeout:g} s: send it at once", field="body"),
            ) from None
        try:
            data = json.loads(b"".join(chunks))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise _HttpError(400, InvalidRequest(f"request body is not valid JSON: {exc}", field="body")) from None
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

    async def call(self, func: Callable[[], _T]) -> _T:
        """Run the provider in a worker thread under the per-request timeout."""
        timeout = self.settings.request_timeout
        try:
            with anyio.fail_after(timeout):
                return await anyio.to_thread.run_sync(func, abandon_on_cancel=True, limiter=self.limiter)
        except TimeoutError:
            raise _HttpError(
                504,
                UpstreamTimeout(
                    f"the provider did not answer within the service's request timeout of {timeout:g} s; "
                    "retry later, or raise server.request_timeout"
                ),
            ) from None

    # -- handlers --------------------------------------------------------------

    def verb(self, cls: type[Any], method: Callable[[Any], Any]) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            entry = self.authenticate(request)
            data = await self.read_json(request)
            self.authorize(entry, data)
            parsed = structure(data, cls, what="request body")
            result = await self.call(lambda: method(parsed))
            return JSONResponse(unstructure(result))

        return handler

    async def health(self, request: Request) -> Response:
        if self.tokens and request.headers.get("authorization"):
            self.authenticate(request)  # a presented token must be valid; none is fine
        status = await anyio.to_thread.run_sync(self.vault.health, limiter=self.limiter)
        return JSONResponse(unstructure(status))

    async def capabilities(self, request: Request) -> Response:
        self.authenticate(request)
        return JSONResponse({"provider": self.vault.name, "capabilities": sorted(self.vault.capabilities)})

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
        result = await self.call(lambda: self.vault.list_documents(parsed))
        return JSONResponse(unstructure(result))

    async def quarantine_keep(self, request: Request) -> Response:
        entry = self.authenticate(request)
        data = await self.read_json(request)
        self.authorize(entry, data)
        record = structure(data, QuarantineRecord, what="request body")
        hook = self.vault.plugin_manager.hook.memvault_quarantine_keep
        kept = await self.call(lambda: hook(record=record))
        return JSONResponse({"kept": kept is True})

    async def quarantine_list(self, request: Request) -> Response:
        entry = self.authenticate(request)
        data = await self.read_json(request)
        self.authorize(entry, data)
        query = structure(data, _QuarantineList, what="request body")
        hook = self.vault.plugin_manager.hook.memvault_quarantine_list
        records = await self.call(lambda: hook(workspace_id=query.workspace_id))
        return JSONResponse({"records": None if records is None else [unstructure(r) for r in records]})

    async def quarantine_get(self, request: Request) -> Response:
        entry = self.authenticate(request)
        data = await self.read_json(request)
        self.authorize(entry, data)
        query = structure(data, _QuarantineGet, what="request body")
        hook = self.vault.plugin_manager.hook.memvault_quarantine_get
        record = await self.call(lambda: hook(workspace_id=query.workspace_id, sha256=query.sha256))
        return JSONResponse({"record": None if record is None else unstructure(record)})

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document())


def _guard(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """Turn memvault errors into typed JSON bodies; anything else is a 500 that says little."""

    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except _HttpError as exc:
            return _error_response(exc.status, exc.error, exc.headers)
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


class _Gate:
    """Outermost ASGI layer: the concurrency bound (503) and one log line per request."""

    def __init__(self, app: ASGIApp, max_concurrent: int) -> None:
        self.app = app
        self.max_concurrent = max_concurrent
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def send_logged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            if self.in_flight >= self.max_concurrent:
                response = _error_response(
                    503,
                    UpstreamError(
                        f"the service is at its limit of {self.max_concurrent} concurrent requests: retry shortly"
                    ),
                    {"Retry-After": "1"},
                )
                await response(scope, receive, send_logged)
                return
            self.in_flight += 1
            try:
                await self.app(scope, receive, send_logged)
            finally:
                self.in_flight -= 1
        finally:
            client = scope.get("client")
            peer = f"{client[0]}:{client[1]}" if client else "-"
            token = scope.get("memvault", {}).get("token", "-")
            log.info(
                "%s %s %s %d %.1fms token=%s",
                peer,
                scope.get("method", "-"),
                scope.get("path", "-"),
                status,
                (time.perf_counter() - started) * 1000,
                token,
            )


def create_app(vault: Vault, settings: ServerSettings | None = None, tokens: TokenStore | None = None) -> ASGIApp:
    """The ASGI application serving ``vault``.

    :param vault: the vault to expose (the caller keeps ownership and closes it).
    :param settings: limits; the defaults of :class:`ServerSettings` otherwise.
    :param tokens: the accepted tokens; with none, every request is allowed.
    """
    settings = settings or ServerSettings()
    service = _Service(vault, settings, tokens or TokenStore([]))
    routes = [
        Route(f"{API_PREFIX}/retain", _guard(service.verb(RetainRequest, vault.retain)), methods=["POST"]),
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
    ]
    app = Starlette(routes=routes)
    return _Gate(app, settings.max_concurrent)
