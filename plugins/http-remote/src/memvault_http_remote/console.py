"""The operator console: server-rendered pages under ``/console`` of ``memvault serve``.

Same process, same tokens and the same workspace bounds as the JSON routes. An
operator logs in with a bearer token from the service's tokens; the console keeps
the token's entry in memory behind a random session id, which is all the cookie
holds (``HttpOnly``, ``SameSite=Strict``, ``Path=/console``, ``Secure`` over
https). Sessions end on logout, after :data:`SESSION_IDLE` seconds unused, and
:data:`SESSION_LIFETIME` seconds after login, and with the process.

Pages (``{ws}`` a workspace the token may touch; every handler checks it, 403 otherwise):

==================================  ======  ==============================================
``/console/login``                  GET     the login form (served without a session)
``/console/login``                  POST    ``token`` -> a session; 303 to the workspaces
``/console/logout``                 POST    ends the session
``/console/workspaces``             GET     the workspaces the token may see
``/console/w/{ws}``                 GET     partitions and documents (``list_documents``)
``/console/w/{ws}/doc``             GET     one document's body (``?agent=&crew=&label=``)
``/console/w/{ws}/search``          GET     a recall with each hit's score parts
``/console/w/{ws}/quarantine``      GET     the quarantine copies kept for the workspace
``/console/w/{ws}/quarantine/{d}``  GET     one copy; POST ``.../delete`` deletes it
``/console/w/{ws}/erase``           GET     the erasure form; POST erases a data subject, shows the proof
``/console/health``                 GET     the provider's health, pending erasures, embedding backlog
``/console/static/{name}``          GET     the stylesheet and script (served without a session)
==================================  ======  ==============================================

Memory text is attacker-controlled: Jinja2 escapes everything it renders
(autoescape on, no ``|safe`` anywhere), links are built from quoted path
segments and query strings (:func:`href`), and every response carries
:data:`SECURITY_HEADERS`: a Content-Security-Policy without inline script or
style and without any other origin. A GET never changes anything; a POST needs
the session's CSRF token (a synchronizer token in the form) and a same-origin
``Origin`` or ``Sec-Fetch-Site`` header.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import Any, Final, Protocol, TypeVar
from urllib.parse import parse_qsl, quote, urlencode

from attrs import define, frozen
from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request, cookie_parser
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memvault.contract.errors import InvalidRequest, MemvaultError, NotSupported, Unauthorized
from memvault.contract.models import (
    DocumentInfo,
    ForgetRequest,
    HealthStatus,
    ListDocumentsRequest,
    QuarantineRecord,
    ReadRequest,
    RecallRequest,
    parse_label,
    validate_identifier,
    validate_sha256,
)
from memvault.vault import Vault
from memvault_http_remote.errorwire import status_for
from memvault_http_remote.limits import HttpRefusal, read_body
from memvault_http_remote.metrics import review_counts
from memvault_http_remote.settings import ServerSettings, TokenEntry, TokenStore

__all__ = [
    "CONSOLE_PREFIX",
    "CONTENT_SECURITY_POLICY",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "SESSION_IDLE",
    "SESSION_LIFETIME",
    "console_app",
    "console_parts",
    "href",
]

_T = TypeVar("_T")

CONSOLE_PREFIX: Final = "/console"
SESSION_COOKIE: Final = "memvault_console"
#: Seconds a session lives without a request.
SESSION_IDLE: Final = 30 * 60
#: Seconds a session lives after its login, however busy.
SESSION_LIFETIME: Final = 12 * 60 * 60
#: Sessions kept at most (the oldest go first): logins cannot grow the process without bound.
MAX_SESSIONS: Final = 1000
#: A login or action form is a few hundred bytes; nothing larger is read.
MAX_FORM_BYTES: Final = 16 * 1024
#: Characters of a quarantine copy shown in its list's excerpt.
EXCERPT_CHARS: Final = 160

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: Final = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode("ascii")),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
_STATIC: Final = {"console.css": "text/css; charset=utf-8", "console.js": "text/javascript; charset=utf-8"}


class Run(Protocol):
    """How the console calls the provider: the service's ``_Service.call`` (bounded threads, its timeout)."""

    def __call__(self, scope: Scope, func: Callable[[], _T]) -> Awaitable[_T]: ...


def href(*segments: str, **query: str) -> str:
    """A console URL: each path segment percent-quoted whole, the query url-encoded, empty values left out.

    Memory text never becomes a scheme, host or path separator of a link: at most a quoted segment
    or query value under ``/console``.
    """
    path = CONSOLE_PREFIX + "".join("/" + quote(segment, safe="") for segment in segments)
    present = {name: value for name, value in query.items() if value}
    return path + ("?" + urlencode(present) if present else "")


@define
class _Session:
    entry: TokenEntry
    csrf: str
    created: float
    seen: float


class _Page(Exception):
    """Stop a handler and answer with this response (a redirect to the login, an error page)."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


@frozen
class _Partition:
    kind: str  # "agent" or "crew"
    owner: str
    documents: list[DocumentInfo]

    @property
    def query(self) -> dict[str, str]:
        return {"agent": self.owner} if self.kind == "agent" else {"crew": self.owner}


class _Console:
    def __init__(
        self,
        vault: Vault,
        settings: ServerSettings,
        tokens: TokenStore,
        run: Run,
        health: Callable[[], Awaitable[HealthStatus]],
    ) -> None:
        self.vault = vault
        self.settings = settings
        self.tokens = tokens
        self.run = run
        self.health_status = health
        self.sessions: dict[str, _Session] = {}
        self.templates = Environment(
            loader=PackageLoader("memvault_http_remote", "console_templates"),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.globals["href"] = href
        self.static_files = {
            name: resources.files("memvault_http_remote").joinpath(f"console_static/{name}").read_bytes()
            for name in _STATIC
        }

    # -- sessions ----------------------------------------------------------------------------------

    def entry_of(self, scope: Scope) -> TokenEntry | None:
        """The token behind a console request's live session, read from its scope (changes nothing).

        The service's request gate counts such a request against its token's own bound
        (``max_per_token``), not the bound every caller without a bearer token shares
        (``max_unauthenticated``): anonymous callers holding that shared bound cannot lock a
        logged-in operator out of the console.
        """
        if scope.get("type") != "http" or not str(scope.get("path", "")).startswith(CONSOLE_PREFIX + "/"):
            return None
        header = ""
        for name, value in scope.get("headers", ()):
            if name == b"cookie":
                header = value.decode("latin-1")
                break
        sid = cookie_parser(header).get(SESSION_COOKIE, "") if header else ""
        found = self.sessions.get(sid) if sid else None
        if found is None:
            return None
        now = time.monotonic()
        if now - found.seen > SESSION_IDLE or now - found.created > SESSION_LIFETIME:
            return None
        return found.entry

    def session(self, request: Request) -> _Session | None:
        """The caller's live session, or ``None`` (expired ones are dropped)."""
        sid = request.cookies.get(SESSION_COOKIE, "")
        found = self.sessions.get(sid) if sid else None
        if found is None:
            return None
        now = time.monotonic()
        if now - found.seen > SESSION_IDLE or now - found.created > SESSION_LIFETIME:
            del self.sessions[sid]
            return None
        found.seen = now
        return found

    def require(self, request: Request) -> _Session:
        """The session, or stop: a GET goes to the login page (nothing else is shown), a POST is refused."""
        found = self.session(request)
        if found is not None:
            return found
        if request.method in ("GET", "HEAD"):
            raise _Page(RedirectResponse(href("login"), status_code=303))
        raise _Page(self.error(request, None, 403, "you are not logged in (or your session expired): log in again"))

    def open_session(self, entry: TokenEntry) -> str:
        now = time.monotonic()
        for sid, old in list(self.sessions.items()):
            if now - old.seen > SESSION_IDLE or now - old.created > SESSION_LIFETIME:
                del self.sessions[sid]
        while len(self.sessions) >= MAX_SESSIONS:
            del self.sessions[min(self.sessions, key=lambda s: self.sessions[s].created)]
        sid = secrets.token_urlsafe(32)
        self.sessions[sid] = _Session(entry=entry, csrf=secrets.token_urlsafe(32), created=now, seen=now)
        return sid

    # -- checks ------------------------------------------------------------------------------------

    def workspace(self, request: Request, session: _Session) -> str:
        """The ``{ws}`` of the path: a valid id the session's token may touch (400 / 403 otherwise)."""
        workspace = str(request.path_params["ws"])
        try:
            validate_identifier(workspace, "workspace_id")
        except InvalidRequest as exc:
            raise _Page(self.error(request, session, 400, str(exc))) from None
        if not session.entry.allows(workspace):
            raise _Page(
                self.error(
                    request,
                    session,
                    403,
                    "this token is not allowed on that workspace: log in with a token bound to it",
                )
            )
        return workspace

    async def form(self, request: Request, session: _Session | None) -> dict[str, str]:
        """A POST's form fields, after the cross-site checks (403): same origin, and the session's CSRF token."""
        self.same_origin(request, session)
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
            # Not one of the console's forms, so it cannot carry the CSRF token either.
            raise _Page(self.error(request, session, 403, "refused: send the console's own forms"))
        body = await read_body(
            request.receive,
            request.scope.get("headers", ()),
            max_bytes=min(self.settings.max_body_bytes, MAX_FORM_BYTES),
            timeout=self.settings.body_timeout,
            prefix="server",
        )
        try:
            fields = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20))
        except (UnicodeDecodeError, ValueError):
            raise _Page(self.error(request, session, 400, "the form is not valid urlencoded UTF-8")) from None
        if session is not None and not hmac.compare_digest(
            fields.get("csrf", "").encode("utf-8"), session.csrf.encode("utf-8")
        ):
            raise _Page(
                self.error(
                    request, session, 403, "the form's CSRF token is missing or stale: reload the page and retry"
                )
            )
        return fields

    def same_origin(self, request: Request, session: _Session | None) -> None:
        """403 unless the browser says the request comes from this origin.

        ``Sec-Fetch-Site`` (which no page can set) must say ``same-origin`` when present; a
        browser without it must send an ``Origin`` equal to the console's own. Under
        ``Referrer-Policy: no-referrer`` Chromium sends ``Origin: null`` on a form POST, so
        ``null`` counts only beside ``Sec-Fetch-Site: same-origin``.
        """
        site = request.headers.get("sec-fetch-site")
        origin = request.headers.get("origin")
        own = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if site is not None and site != "same-origin":
            refused = f"the request comes from another site (Sec-Fetch-Site: {site})"
        elif site is None and origin is None:
            refused = "the request names no origin (a browser sends Origin or Sec-Fetch-Site on a POST)"
        elif origin is not None and origin != own and not (origin == "null" and site == "same-origin"):
            refused = "the request comes from another origin"
        else:
            return
        raise _Page(self.error(request, session, 403, f"refused: {refused}; use the console's own pages"))

    async def call(self, request: Request, session: _Session, func: Callable[[], _T]) -> _T:
        """The provider through the service's bounded worker threads; its errors become error pages."""
        try:
            return await self.run(request.scope, func)
        except HttpRefusal as exc:
            raise _Page(self.error(request, session, exc.status, str(exc.error))) from None
        except NotSupported as exc:
            raise _Page(self.error(request, session, 501, str(exc))) from None
        except MemvaultError as exc:
            status = status_for(exc)
            message = str(exc) if status < 500 else "the service's provider failed; see the service log"
            raise _Page(self.error(request, session, status, message)) from None

    # -- rendering ---------------------------------------------------------------------------------

    def render(
        self, request: Request, session: _Session | None, name: str, code: int = 200, **context: Any
    ) -> HTMLResponse:
        html = self.templates.get_template(name).render(
            session=session,
            csrf=session.csrf if session else "",
            provider=self.vault.name,
            **context,
        )
        return HTMLResponse(html, status_code=code)

    def error(self, request: Request, session: _Session | None, status: int, message: str) -> HTMLResponse:
        return self.render(request, session, "error.html", status, status=status, message=message)

    # -- pages -------------------------------------------------------------------------------------

    async def root(self, request: Request) -> Response:
        target = "workspaces" if self.session(request) is not None else "login"
        return RedirectResponse(href(target), status_code=303)

    async def login_form(self, request: Request) -> Response:
        if self.session(request) is not None:
            return RedirectResponse(href("workspaces"), status_code=303)
        return self.render(request, None, "login.html", tokens=bool(self.tokens), failed=False)

    async def login(self, request: Request) -> Response:
        fields = await self.form(request, None)
        if not self.tokens:
            return self.render(request, None, "login.html", 403, tokens=False, failed=False)
        entry = self.tokens.lookup(fields.get("token", "").strip())
        if entry is None:
            return self.render(request, None, "login.html", 401, tokens=True, failed=True)
        old = request.cookies.get(SESSION_COOKIE)
        if old:
            self.sessions.pop(old, None)  # a new id at every login: no session fixation
        response = RedirectResponse(href("workspaces"), status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            self.open_session(entry),
            max_age=SESSION_LIFETIME,
            path=CONSOLE_PREFIX,
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
        return response

    async def logout(self, request: Request) -> Response:
        session = self.require(request)
        await self.form(request, session)
        self.sessions.pop(request.cookies.get(SESSION_COOKIE, ""), None)
        response = RedirectResponse(href("login"), status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=CONSOLE_PREFIX, httponly=True, samesite="strict")
        return response

    async def workspaces(self, request: Request) -> Response:
        session = self.require(request)
        patterns = session.entry.workspaces
        exact = {p for p in patterns if not p.endswith("*")}
        found = set(exact)
        listed = True
        if len(exact) < len(patterns):
            # Only a pattern ('team-*', '*') needs the store's listing to find its workspaces.
            try:
                documents = await self.call_listing(request, session, ListDocumentsRequest())
                found |= {d.workspace_id for d in documents if session.entry.allows(d.workspace_id)}
            except NotSupported:
                listed = False
        return self.render(
            request,
            session,
            "workspaces.html",
            workspaces=sorted(found),
            patterns=[p for p in patterns if p.endswith("*")],
            listed=listed,
        )

    async def call_listing(
        self, request: Request, session: _Session, query: ListDocumentsRequest
    ) -> list[DocumentInfo]:
        """``list_documents`` (raising :class:`NotSupported` for the caller to handle)."""
        try:
            return (await self.run(request.scope, lambda: self.vault.list_documents(query))).documents
        except NotSupported:
            raise
        except HttpRefusal as exc:
            raise _Page(self.error(request, session, exc.status, str(exc.error))) from None
        except MemvaultError as exc:
            raise _Page(self.error(request, session, status_for(exc), str(exc))) from None

    async def open_workspace(self, request: Request) -> Response:
        """The workspaces page's "open by id" form (a GET: it only navigates)."""
        self.require(request)
        workspace = request.query_params.get("ws", "")
        return RedirectResponse(href("w", workspace) if workspace else href("workspaces"), status_code=303)

    async def workspace_page(self, request: Request) -> Response:
        session = self.require(request)
        workspace = self.workspace(request, session)
        try:
            documents = await self.call_listing(request, session, ListDocumentsRequest(workspace_id=workspace))
        except NotSupported as exc:
            return self.render(
                request, session, "workspace.html", workspace=workspace, partitions=[], unsupported=str(exc)
            )
        partitions: dict[tuple[str, str], list[DocumentInfo]] = {}
        for document in documents:
            key = ("crew", document.crew_id) if document.crew_id else ("agent", document.agent_id)
            partitions.setdefault(key, []).append(document)
        return self.render(
            request,
            session,
            "workspace.html",
            workspace=workspace,
            partitions=[_Partition(kind, owner, docs) for (kind, owner), docs in sorted(partitions.items())],
            unsupported="",
        )

    async def document(self, request: Request) -> Response:
        session = self.require(request)
        workspace = self.workspace(request, session)
        agent, crew, label = (request.query_params.get(n, "") for n in ("agent", "crew", "label"))
        try:
            tier, key = parse_label(label, "label")
            read = ReadRequest(workspace_id=workspace, agent_id=agent, crew_id=crew, tier=tier, key=key)
        except InvalidRequest as exc:
            return self.error(request, session, 400, str(exc))
        result = await self.call(request, session, lambda: self.vault.read(read))
        return self.render(
            request, session, "document.html", workspace=workspace, agent=agent, crew=crew, label=label, result=result
        )

    async def search(self, request: Request) -> Response:
        session = self.require(request)
        workspace = self.workspace(request, session)
        params = {n: request.query_params.get(n, "") for n in ("agent", "crew", "q", "tier")}
        hits = None
        if params["q"]:
            try:
                recall = RecallRequest(
                    workspace_id=workspace,
                    agent_id=params["agent"],
                    crew_id=params["crew"],
                    query=params["q"],
                    tier=params["tier"] or None,
                )
            except InvalidRequest as exc:
                return self.error(request, session, 400, str(exc))
            result = await self.call(request, session, lambda: self.vault.recall(recall))
            hits = [(hit, _owner_query(hit.source, params)) for hit in result.hits]
            quarantined = result.quarantined
        else:
            quarantined = []
        return self.render(
            request, session, "search.html", workspace=workspace, params=params, hits=hits, quarantined=quarantined
        )

    async def quarantine(self, request: Request) -> Response:
        session = self.require(request)
        workspace = self.workspace(request, session)
        records = await self.call(request, session, lambda: self.vault.quarantine_list(workspace))
        return self.render(
            request,
            session,
            "quarantine.html",
            workspace=workspace,
            records=records,
            excerpt=_excerpt,
            deleted=request.query_params.get("deleted", ""),
        )

    async def quarantine_copy(self, request: Request) -> Response:
        session = self.require(request)
        workspace = self.workspace(request, session)
        digest = self.digest(request, session)
        record = await self.call(request, session, lambda: self.vault.quarantine_get(workspace, digest))
        if record is None:
            return self.error(request, session, 404, "no quarantine copy with that sha256 in this workspace")
        return self.render(request, session, "quarantine_copy.html", workspace=workspace, record=record)

    async def quarantine_delete(self, request: Request) -> Response:
        session = self.require(request)
        workspace = self.workspace(request, session)
        digest = self.digest(request, session)
        await self.form(request, session)
        deleted = await self.call(request, session, lambda: self.vault.quarantine_delete(workspace, digest))
        return RedirectResponse(href("w", workspace, "quarantine", deleted=f"{deleted}:{digest}"), status_code=303)

    def digest(self, request: Request, session: _Session) -> str:
        digest = str(request.path_params["sha256"])
        try:
            return validate_sha256(digest, "sha256")
        except InvalidRequest as exc:
            raise _Page(self.error(request, session, 400, str(exc))) from None

    async def erase_form(self, request: Request) -> Response:
        session = self.require(request)
        workspace = self.workspace(request, session)
        return self.render(request, session, "erase.html", workspace=workspace, proof=None)

    async def erase(self, request: Request) -> Response:
        """Forget by data subject, then show what went and what is left (the proof)."""
        session = self.require(request)
        workspace = self.workspace(request, session)
        fields = await self.form(request, session)
        subject = fields.get("subject", "").strip()
        try:
            if not subject:
                raise InvalidRequest("name the data subject to erase", field="data_subject_id")
            forget = ForgetRequest(workspace_id=workspace, data_subject_id=subject)
        except InvalidRequest as exc:
            return self.error(request, session, 400, str(exc))
        before = await self.subject_traces(request, session, workspace, subject)
        result = await self.call(request, session, lambda: self.vault.forget(forget))
        after = await self.subject_traces(request, session, workspace, subject)
        proof = {
            "subject": subject,
            "removed": result.removed,
            "pending": result.pending,
            "documents": before[0],
            "copies": before[1],
            "left_documents": after[0],
            "left_copies": after[1],
        }
        return self.render(request, session, "erase.html", workspace=workspace, proof=proof)

    async def subject_traces(
        self, request: Request, session: _Session, workspace: str, subject: str
    ) -> tuple[list[DocumentInfo] | None, list[QuarantineRecord] | None]:
        """The documents tagged with ``subject`` and its quarantine copies (``None``: the provider cannot list them)."""
        try:
            listed = await self.call_listing(request, session, ListDocumentsRequest(workspace_id=workspace))
            documents: list[DocumentInfo] | None = [d for d in listed if subject in d.subjects]
        except NotSupported:
            documents = None
        try:
            kept = await self.run(request.scope, lambda: self.vault.quarantine_list(workspace))
            copies: list[QuarantineRecord] | None = [r for r in kept if r.data_subject_id == subject]
        except NotSupported:
            copies = None
        return documents, copies

    async def health(self, request: Request) -> Response:
        session = self.require(request)
        status = await self.health_status()
        return self.render(
            request,
            session,
            "health.html",
            status=status,
            capabilities=sorted(self.vault.capabilities),
            reviews=review_counts(self.vault),
        )

    async def static(self, request: Request) -> Response:
        name = str(request.path_params["name"])
        if name not in _STATIC:
            return self.error(request, None, 404, "no such file")
        return Response(self.static_files[name], media_type=_STATIC[name], headers={"cache-control": "no-cache"})

    async def not_found(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        session = self.session(request)
        if exc.status_code == 405:
            return self.error(request, session, 405, f"{request.method} is not allowed here")
        return self.error(request, session, exc.status_code, "no such page")


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "\u2026"


def _owner_query(source: str, params: Mapping[str, str]) -> dict[str, str]:
    """The partition a hit's document lives in: the crew for a ``CREW`` label, the agent otherwise."""
    try:
        tier, _ = parse_label(source, "source")
    except InvalidRequest:
        return {}
    return {"crew": params["crew"]} if tier.value == "CREW" else {"agent": params["agent"]}


def _guarded(
    console: _Console, handler: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except _Page as page:
            return page.response
        except HttpRefusal as exc:
            return console.error(request, console.session(request), exc.status, str(exc.error))
        except ClientDisconnect:
            return console.error(request, None, 400, "the client disconnected before its form arrived")
        except Unauthorized as exc:
            return console.error(request, console.session(request), 403, str(exc))

    return guarded


class _SecurityHeaders:
    """Every console response carries :data:`SECURITY_HEADERS`; pages (not the static files) ``no-store``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _REPLACED]
                headers.extend(SECURITY_HEADERS)
                cache = next((v for k, v in message.get("headers", []) if k.lower() == b"cache-control"), b"no-store")
                headers.append((b"cache-control", cache))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


_REPLACED: Final = frozenset({k for k, _ in SECURITY_HEADERS} | {b"cache-control"})


def console_app(
    vault: Vault,
    settings: ServerSettings,
    tokens: TokenStore,
    *,
    run: Run,
    health: Callable[[], Awaitable[HealthStatus]],
) -> ASGIApp:
    """The console as an ASGI app, to mount at :data:`CONSOLE_PREFIX`.

    :param run: runs a provider call the way the service does (bounded threads, its timeout).
    :param health: the service's cached health probe.
    """
    return console_parts(vault, settings, tokens, run=run, health=health)[0]


def console_parts(
    vault: Vault,
    settings: ServerSettings,
    tokens: TokenStore,
    *,
    run: Run,
    health: Callable[[], Awaitable[HealthStatus]],
) -> tuple[ASGIApp, Callable[[Scope], TokenEntry | None]]:
    """:func:`console_app`, and the look-up of a request's session token for the service's request gate."""
    console = _Console(vault, settings, tokens, run, health)

    def g(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        return _guarded(console, handler)

    routes = [
        Route("/", g(console.root), methods=["GET"]),
        Route("/login", g(console.login_form), methods=["GET"]),
        Route("/login", g(console.login), methods=["POST"]),
        Route("/logout", g(console.logout), methods=["POST"]),
        Route("/workspaces", g(console.workspaces), methods=["GET"]),
        Route("/open", g(console.open_workspace), methods=["GET"]),
        Route("/health", g(console.health), methods=["GET"]),
        Route("/static/{name}", g(console.static), methods=["GET"]),
        Route("/w/{ws}", g(console.workspace_page), methods=["GET"]),
        Route("/w/{ws}/doc", g(console.document), methods=["GET"]),
        Route("/w/{ws}/search", g(console.search), methods=["GET"]),
        Route("/w/{ws}/quarantine", g(console.quarantine), methods=["GET"]),
        Route("/w/{ws}/quarantine/{sha256}", g(console.quarantine_copy), methods=["GET"]),
        Route("/w/{ws}/quarantine/{sha256}/delete", g(console.quarantine_delete), methods=["POST"]),
        Route("/w/{ws}/erase", g(console.erase_form), methods=["GET"]),
        Route("/w/{ws}/erase", g(console.erase), methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: console.not_found})
    return _SecurityHeaders(app), console.entry_of
