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
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import uuid
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp, Receive, Scope, Send

from memvault import MemvaultError
from memvault.lifecycle.tools import ToolResult
from memvault_http_remote.settings import TokenEntry, TokenStore
from memvault_mcp.service import Caller, MemoryService

__all__ = [
    "PRINCIPAL_SCOPE_KEY",
    "BearerTokens",
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
#: Seconds a connection to the streamable HTTP server has to send a request's head (408 past it).
HEAD_TIMEOUT: Final = 5.0
_SESSION_HEADER: Final = "mcp-session-id"
#: JSON-RPC "invalid params": a resource URI that names nothing this caller may read.
_INVALID_PARAMS: Final = -32602
_INTERNAL_ERROR: Final = -32603

CallerOf = Callable[[ServerRequestContext[Any, Any]], Caller]


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


def build_server(service: MemoryService, caller_of: CallerOf, *, name: str = "memvault") -> Server[Any]:
    """The low-level MCP server over ``service``; ``caller_of`` says who sent each request."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        caller = caller_of(ctx)
        listed = await anyio.to_thread.run_sync(service.list_tools, caller)
        tools = [
            types.Tool(name=t["name"], description=t["description"], input_schema=t["inputSchema"]) for t in listed
        ]
        return types.ListToolsResult(tools=tools, ttl_ms=0, cache_scope="private")

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            caller = caller_of(ctx)
            result = await anyio.to_thread.run_sync(service.call_tool, caller, params.name, params.arguments or {})
        except Exception as exc:
            log.exception("tools/call %s failed", params.name)
            result = ToolResult(ok=False, content=f"{type(exc).__name__}: {exc}", error="ToolError")
        return to_call_result(result)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        caller = caller_of(ctx)
        found = await anyio.to_thread.run_sync(service.list_resources, caller)
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
            text = await anyio.to_thread.run_sync(service.read_resource, caller, uri)
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


def http_app(
    service: MemoryService,
    tokens: TokenStore,
    *,
    host: str = "127.0.0.1",
    path: str = "/mcp",
    open_principal: str | None = None,
) -> ASGIApp:
    """The streamable HTTP app (serve it with uvicorn), behind :class:`BearerTokens`."""
    server = build_server(service, http_caller(tokens, open_principal))
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    return BearerTokens(app, tokens)


def run_http(
    service: MemoryService,
    tokens: TokenStore,
    *,
    host: str,
    port: int,
    path: str = "/mcp",
    open_principal: str | None = None,
    describe: str = "",
) -> None:
    """Serve streamable HTTP with uvicorn until SIGINT/SIGTERM; prints the bound address (also for port 0)."""
    import uvicorn

    from memvault_http_remote.server import bound_urls, bounded_http_protocol

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if not self.started:
                return
            for url in bound_urls(self):
                print(f"memvault mcp: listening on {url}{path} ({describe})", flush=True)

    app = http_app(service, tokens, host=host, path=path, open_principal=open_principal)
    # The service's own protocol: malformed HTTP gets a typed 400, and a request head must arrive
    # within HEAD_TIMEOUT seconds and 16 KiB (uvicorn alone waits for ever and, on httptools,
    # reads a head of any length).
    protocol = bounded_http_protocol(HEAD_TIMEOUT)
    _Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, http=protocol)).run()
