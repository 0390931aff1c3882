"""The MCP server: a :class:`MemoryService` behind the official ``mcp`` SDK (2.x low-level ``Server``).

* ``tools/list`` and ``tools/call``: the slots' tools, bound to the caller's
  partition. A refused call (bad arguments, a cap, the scanner, a provider
  outage) is a tool result with ``isError: true`` and the message, never a
  protocol error, and never a crashed server.
* ``resources/list``, ``resources/templates/list`` and ``resources/read``:
  the caller's documents, read through the slot's ``read`` tool, so the
  scanner's quarantine applies unchanged.

Transports: :func:`run_stdio` (one local user, the configured principal) and
:func:`http_app` (streamable HTTP behind the bearer tokens of ``memvault serve``:
the token's name is the principal, its workspaces bound the slots it sees).

Over HTTP the server holds its callers to the limits of ``memvault serve``, run
by the same code (:mod:`memvault_http_remote.limits`), configured by the
``[http]`` table (:class:`~memvault_mcp.config.HttpLimits`): requests in flight
in total, per token and without a valid token (503); a body's arrival time and
size (408, 413; a caller leaving mid-body is one log line); provider calls on at
most ``max_concurrent`` threads, each under ``request_timeout`` (a typed
``UpstreamTimeout``). Its own: tool calls in flight per slot (``max_per_slot``,
so a slot whose provider hangs cannot take the threads the other slots need),
stateful sessions per token (``max_sessions_per_token``, 429 past it) and in
total, and their idle expiry (``session_idle_timeout``).
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import socket
import uuid
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memvault import MemvaultError, UpstreamError, UpstreamTimeout
from memvault.lifecycle import Slot
from memvault.lifecycle.tools import ToolResult
from memvault_http_remote.limits import HttpRefusal, ProviderCalls, RequestGate, read_body, refusal_response
from memvault_http_remote.settings import TokenEntry, TokenStore
from memvault_mcp.config import HttpLimits
from memvault_mcp.service import Caller, MemoryService

__all__ = [
    "PRINCIPAL_SCOPE_KEY",
    "BearerTokens",
    "ToolCalls",
    "build_server",
    "http_app",
    "principal_of",
    "run_http",
    "run_stdio",
    "stdio_caller",
    "to_call_result",
]

log = logging.getLogger("memvault.mcp")

#: Where :class:`BearerTokens` puts the authenticated token entry in the ASGI scope.
PRINCIPAL_SCOPE_KEY: Final = "memvault.token"
#: Seconds a connection to the streamable HTTP server has to send a request's head (408 past it), by default
#: (``[http] body_timeout``).
HEAD_TIMEOUT: Final = HttpLimits().body_timeout
_SESSION_HEADER: Final = "mcp-session-id"
#: JSON-RPC "invalid params": a resource URI that names nothing this caller may read.
_INVALID_PARAMS: Final = -32602
_INTERNAL_ERROR: Final = -32603
#: JSON-RPC "invalid request": a new session refused (the token holds its share).
_INVALID_REQUEST: Final = -32600

CallerOf = Callable[[ServerRequestContext[Any, Any]], Caller]
_T = TypeVar("_T")


def _version() -> str:
    try:
        return version("memvault-mcp")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


def principal_of(entry: TokenEntry) -> str:
    """The principal a token stands for: its ``name``, else its hash (two tokens with one name share memory)."""
    return entry.name or f"sha256-{entry.sha256[:32]}"


def to_call_result(result: ToolResult) -> types.CallToolResult:
    """A memvault tool result as an MCP one: errors carry ``isError`` and the message, prefixed by the class."""
    if result.ok:
        structured = result.data if isinstance(result.data, dict) else None
        return types.CallToolResult(
            content=[types.TextContent(text=result.content)], structured_content=structured, is_error=False
        )
    text = f"{result.error}: {result.content}" if result.error else result.content
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


class ToolCalls:
    """How an HTTP server runs the service's (synchronous) work: bounded threads, deadlines, slots.

    Every request's work runs through :class:`~memvault_http_remote.limits.ProviderCalls`
    (at most ``max_concurrent`` threads, each call under ``request_timeout``, a call
    given up on keeping its thread and its request's gate slots until it returns);
    a tool call also holds one of its slot's ``max_per_slot`` places until its thread
    returns. So 160 calls to a slot whose provider never answers hold that slot's
    places and their callers' own bounds, and the other slots keep the rest.
    """

    def __init__(self, limits: HttpLimits, gate: RequestGate | None = None) -> None:
        self.provider_calls = ProviderCalls(
            limits, prefix="http", what="MCP server", answered="it was answered with a timeout error", log=log
        )
        self.provider_calls.gate = gate
        self.max_per_slot = limits.max_per_slot
        #: Tool calls in flight per slot, abandoned ones included (until their threads return).
        self.per_slot: dict[str, int] = {}

    async def run(self, ctx: ServerRequestContext[Any, Any], func: Callable[[], _T], *, slot: str | None = None) -> _T:
        """``func()`` on a worker thread, for the request of ``ctx``.

        :raises UpstreamTimeout: past ``request_timeout`` (the call runs on, holding its places).
        :raises UpstreamError: the slot already has ``max_per_slot`` calls in flight.
        """
        scope: Scope = getattr(ctx.request, "scope", None) or {}
        if slot is None:
            return await self.provider_calls.run(scope, func)
        held = self.per_slot.get(slot, 0)
        if held >= self.max_per_slot:
            raise UpstreamError(
                f"slot {slot!r} already has {held} tool calls in flight (http.max_per_slot), some perhaps "
                "still waiting for a provider that does not answer: retry shortly; the other slots are not affected"
            )
        self.per_slot[slot] = held + 1
        return await self.provider_calls.run(scope, func, on_return=lambda: self._returned(slot))

    def _returned(self, slot: str) -> None:
        left = self.per_slot[slot] - 1
        if left:
            self.per_slot[slot] = left
        else:
            del self.per_slot[slot]


def build_server(
    service: MemoryService, caller_of: CallerOf, *, name: str = "memvault", calls: ToolCalls | None = None
) -> Server[Any]:
    """The low-level MCP server over ``service``; ``caller_of`` says who sent each request.

    :param calls: how the service's work runs (HTTP: bounded, under deadlines); ``None``: on
        anyio's worker threads, unbounded in time (stdio, one local user).
    """
    slot_names = frozenset(slot.name for slot in service.slots)

    async def work(ctx: ServerRequestContext[Any, Any], func: Callable[[], _T], slot: str | None = None) -> _T:
        if calls is None:
            return await anyio.to_thread.run_sync(func)
        return await calls.run(ctx, func, slot=slot)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        caller = caller_of(ctx)
        if calls is None:
            listed = await anyio.to_thread.run_sync(service.list_tools, caller)
        else:
            listed = await _each_slot(ctx, calls, caller)
        tools = [
            types.Tool(name=t["name"], description=t["description"], input_schema=t["inputSchema"]) for t in listed
        ]
        return types.ListToolsResult(tools=tools, ttl_ms=0, cache_scope="private")

    async def _each_slot(ctx: ServerRequestContext[Any, Any], calls: ToolCalls, caller: Caller) -> list[dict[str, Any]]:
        """Every slot's tools, each slot on its own thread under its own bound: a slot whose provider
        hangs (or already has ``max_per_slot`` calls in flight) is left out, without holding up the others.

        The SDK lists the tools before every stateless ``tools/call`` (to check its ``Mcp-Name``
        header): one listing through a hung slot would hold every tenant's calls for the deadline.
        """
        slots = service.visible_slots(caller)
        found: list[list[dict[str, Any]]] = [[] for _ in slots]

        async def one(index: int, slot: Slot) -> None:
            try:
                found[index] = await calls.run(ctx, lambda: service.slot_tools(caller, slot), slot=slot.name)
            except MemvaultError as exc:
                log.warning("slot %r left out of tools/list: %s: %s", slot.name, type(exc).__name__, exc)

        async with anyio.create_task_group() as group:
            for index, slot in enumerate(slots):
                group.start_soon(one, index, slot)
        return [tool for tools in found for tool in tools]

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        prefix = params.name.split("__", 1)[0]
        try:
            caller = caller_of(ctx)
            arguments = params.arguments or {}
            result = await work(
                ctx,
                lambda: service.call_tool(caller, params.name, arguments),
                slot=prefix if prefix in slot_names else None,
            )
        except MemvaultError as exc:  # the deadline, or the slot's bound: the caller's answer, not a bug
            result = ToolResult(ok=False, content=str(exc), error=type(exc).__name__)
        except Exception as exc:
            log.exception("tools/call %s failed", params.name)
            result = ToolResult(ok=False, content=f"{type(exc).__name__}: {exc}", error="ToolError")
        return to_call_result(result)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        caller = caller_of(ctx)
        try:
            found = await work(ctx, lambda: service.list_resources(caller))
        except UpstreamTimeout as exc:
            raise MCPError(_INTERNAL_ERROR, f"{type(exc).__name__}: {exc}") from exc
        resources = [
            types.Resource(uri=r.uri, name=r.name, title=r.title, description=r.description, mime_type=r.mime_type)
            for r in found
        ]
        return types.ListResourcesResult(resources=resources, ttl_ms=0, cache_scope="private")

    async def list_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        caller = caller_of(ctx)
        found = service.list_templates(caller)
        templates = [
            types.ResourceTemplate(
                uri_template=t.uri_template, name=t.name, description=t.description, mime_type=t.mime_type
            )
            for t in found
        ]
        return types.ListResourceTemplatesResult(resource_templates=templates, ttl_ms=0, cache_scope="private")

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        caller = caller_of(ctx)
        try:
            text = await work(ctx, lambda: service.read_resource(caller, uri))
        except MemvaultError as exc:
            code = _INVALID_PARAMS if isinstance(exc, ValueError) else _INTERNAL_ERROR
            raise MCPError(code, f"{type(exc).__name__}: {exc}") from exc
        contents: list[types.TextResourceContents | types.BlobResourceContents] = [
            types.TextResourceContents(uri=uri, mime_type="text/markdown", text=text)
        ]
        return types.ReadResourceResult(contents=contents, ttl_ms=0, cache_scope="private")

    return Server(
        name,
        version=_version(),
        instructions=(
            "Long-term memory. Each tool is named <slot>__<tool> and works only on the memory this "
            "server assigned to you; search before asking the user something they may have told you."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


# -- stdio ---------------------------------------------------------------------


def stdio_caller(principal: str) -> CallerOf:
    """Every request of a stdio server comes from the one local user; the process is the session."""
    caller = Caller(principal=principal, session_id=f"mcp-stdio-{uuid.uuid4().hex}")

    def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller:
        return caller

    return caller_of


async def run_stdio(service: MemoryService, principal: str) -> None:
    """Serve over standard input/output until the client closes it."""
    server = build_server(service, stdio_caller(principal))
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


# -- streamable HTTP -----------------------------------------------------------


class BearerTokens:
    """ASGI middleware: every HTTP request needs ``Authorization: Bearer <token>`` from the tokens file.

    Unknown or missing tokens get **401** (``WWW-Authenticate: Bearer``), as
    from ``memvault serve``. A known token's entry goes into the ASGI scope
    (:data:`PRINCIPAL_SCOPE_KEY`), where the handlers read the principal and
    the workspaces it is bound to; nothing the client sends in the body can
    change either. With no tokens at all, every request passes as ``open``.
    """

    def __init__(self, app: ASGIApp, tokens: TokenStore) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.tokens:
            await self.app(scope, receive, send)
            return
        header = ""
        for key, value in scope.get("headers", []):
            if key.lower() == b"authorization":
                header = value.decode("latin-1")
                break
        entry = None
        if header[:7].lower() == "bearer ":
            entry = self.tokens.lookup(header[7:].strip())
        if entry is None:
            body = json.dumps(
                {"error": {"type": "Unauthorized", "message": "a valid bearer token is required (memvault token new)"}}
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", b"Bearer"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        scope[PRINCIPAL_SCOPE_KEY] = entry
        # The SDK's own credential check: a stateful MCP session answers only the token that opened it.
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=f"memvault:{entry.sha256}", scopes=[]))
        await self.app(scope, receive, send)


def http_caller(tokens: TokenStore, open_principal: str | None) -> CallerOf:
    """The caller of an HTTP request: the authenticated token's principal and workspaces.

    With no tokens configured (loopback only, or ``--insecure-no-auth``) every
    caller is ``open_principal`` on every workspace.
    """

    def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller:
        request = ctx.request
        scope: dict[str, Any] = getattr(request, "scope", None) or {}
        headers = getattr(request, "headers", None)
        session = headers.get(_SESSION_HEADER) if headers is not None else None
        entry = scope.get(PRINCIPAL_SCOPE_KEY)
        credential = entry.sha256 if isinstance(entry, TokenEntry) else "open"
        # No MCP session (stateless requests): a fresh id, so by-session memory never leaks across requests.
        # The credential is part of the id, so another token presenting the same session id gets other memory.
        raw = f"{credential}:{session or uuid.uuid4().hex}"
        session_id = "mcp-http-" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:40]
        if not tokens:
            return Caller(principal=open_principal, session_id=session_id)
        if not isinstance(entry, TokenEntry):
            return Caller(principal=None, session_id=session_id, allows=lambda workspace: False)
        return Caller(principal=principal_of(entry), session_id=session_id, allows=entry.allows)

    return caller_of


class _OverSessionCap(Exception):
    def __init__(self, held: int) -> None:
        super().__init__(held)
        self.held = held


#: The scope of the request a session manager is serving (its admission sees no scope of its own).
_SERVING: contextvars.ContextVar[Scope] = contextvars.ContextVar("memvault_mcp_serving")


class _SessionsPerToken(StreamableHTTPSessionManager):
    """The SDK's session manager, holding each token (each peer, without tokens) to ``per_token`` open sessions.

    The SDK bounds only the total (``max_sessions``): one token could open them all,
    and every other tenant's ``initialize`` got 503 until they expired. A token at its
    own bound gets a 429 naming it (the other tokens are not affected); its sessions
    end with a DELETE (the client closing its session) or ``session_idle_timeout``.
    """

    def __init__(self, *, per_token: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.per_token = per_token
        self._owner_of: dict[str, str] = {}

    @staticmethod
    def _owner(scope: Scope) -> str:
        entry = scope.get(PRINCIPAL_SCOPE_KEY)
        if isinstance(entry, TokenEntry):
            return f"token:{entry.sha256}"
        client = scope.get("client")
        return f"peer:{client[0] if client else '-'}"

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        serving = _SERVING.set(scope)
        try:
            await super()._handle_stateful_request(scope, receive, send)
        except _OverSessionCap as exc:
            limits = f"http.max_sessions_per_token = {self.per_token}"
            idle = f"http.session_idle_timeout, {self.session_idle_timeout:g} s" if self.session_idle_timeout else ""
            message = (
                f"this token already holds {exc.held} open MCP sessions ({limits}): end one (the client's "
                f"session DELETE) or wait until one has been idle long enough to close ({idle}), then retry"
            )
            log.warning("refused a new MCP session: %s", message)
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": _INVALID_REQUEST, "message": message}}
            await JSONResponse(body, status_code=429)(scope, receive, send)
        finally:
            _SERVING.reset(serving)

    def _admit_session(self, requestor: Any) -> Any:
        owner = self._owner(_SERVING.get({}))
        held = sum(1 for other in self._owner_of.values() if other == owner)
        if held >= self.per_token:
            raise _OverSessionCap(held)
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self._owner_of[transport.mcp_session_id] = owner
        return transport

    async def _discard_session(self, session_id: str, transport: Any) -> None:
        self._owner_of.pop(session_id, None)
        await super()._discard_session(session_id, transport)


class _BodyLimits:
    """ASGI middleware: a POST's body arrives whole within ``body_timeout`` and ``max_body_bytes``
    (:func:`memvault_http_remote.limits.read_body`, as for ``memvault serve``) before the SDK sees it.

    Past either the caller gets the typed 408 (and the connection ends) or 413. A caller
    that leaves mid-body is one log line: the SDK, reading the body itself, logged a
    3 KB traceback for each.
    """

    def __init__(self, app: ASGIApp, limits: HttpLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(
                receive,
                scope.get("headers", ()),
                max_bytes=self.limits.max_body_bytes,
                timeout=self.limits.body_timeout,
                prefix="http",
            )
        except HttpRefusal as exc:
            await refusal_response(exc.status, exc.error, exc.headers)(scope, receive, send)
            return
        except ClientDisconnect:
            client = scope.get("client")
            log.info("%s left before its request body arrived", f"{client[0]}:{client[1]}" if client else "a client")
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: the disconnect, when it comes
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _transport_security(host: str) -> TransportSecuritySettings | None:
    """DNS rebinding protection on a loopback address, as the SDK's own app sets it."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def _not_counted(scope: Scope) -> bool:
    """A session's GET event stream lives as long as the session and calls no provider: the session
    caps bound those, not the request bounds (which it would hold for ever)."""
    return scope.get("method") != "POST"


def http_app(
    service: MemoryService,
    tokens: TokenStore,
    *,
    host: str = "127.0.0.1",
    path: str = "/mcp",
    open_principal: str | None = None,
    limits: HttpLimits | None = None,
) -> ASGIApp:
    """The streamable HTTP app (serve it with uvicorn): the request gate, then :class:`BearerTokens`,
    then the body limits, then the SDK's session manager, all held to ``limits`` (the ``[http]`` defaults)."""
    limits = limits or HttpLimits()
    calls = ToolCalls(limits)
    server = build_server(service, http_caller(tokens, open_principal), calls=calls)
    sessions = _SessionsPerToken(
        app=server,
        security_settings=_transport_security(host),
        max_request_body_size=limits.max_body_bytes,
        session_idle_timeout=limits.session_idle_timeout,
        max_sessions=limits.max_sessions,
        per_token=limits.max_sessions_per_token,
    )
    starlette = Starlette(
        routes=[Route(path, endpoint=StreamableHTTPASGIApp(sessions))], lifespan=lambda app: sessions.run()
    )
    app = _BodyLimits(starlette, limits)
    gate = RequestGate(BearerTokens(app, tokens), limits, tokens, exempt=_not_counted, prefix="http", log=log)
    calls.provider_calls.gate = gate
    return gate


def run_http(
    service: MemoryService,
    tokens: TokenStore,
    *,
    host: str,
    port: int,
    path: str = "/mcp",
    open_principal: str | None = None,
    describe: str = "",
    limits: HttpLimits | None = None,
) -> None:
    """Serve streamable HTTP with uvicorn until SIGINT/SIGTERM; prints the bound address (also for port 0)."""
    import uvicorn

    from memvault_http_remote.server import MAX_HEAD_BYTES, bound_urls, bounded_http_protocol

    limits = limits or HttpLimits()

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if not self.started:
                return
            for url in bound_urls(self):
                print(f"memvault mcp: listening on {url}{path} ({describe})", flush=True)

    app = http_app(service, tokens, host=host, path=path, open_principal=open_principal, limits=limits)
    # The service's own protocol: malformed HTTP gets a typed 400, a request head must arrive
    # within body_timeout seconds and 16 KiB (uvicorn alone waits for ever and, on httptools,
    # reads a head of any length), and an answer sent before its body arrived ends the connection.
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        limit_concurrency=None,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        http=bounded_http_protocol(limits.body_timeout),
    )
    _Server(config).run()
