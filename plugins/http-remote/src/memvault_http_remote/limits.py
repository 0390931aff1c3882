"""The limits every memvault HTTP server holds its callers to, in one place.

``memvault serve`` (:mod:`memvault_http_remote.app`) and ``memvault mcp
--transport http`` (``memvault_mcp.server``) both run them, configured from
their own settings (``[server]`` of ``memvault.toml``, ``[http]`` of the MCP
configuration), so a bound tightened here is tightened for both:

* :class:`RequestGate`, the outermost ASGI layer: requests in flight in total
  (``max_concurrent``), per token (``max_per_token``; per peer address when the
  server runs without tokens) and without a valid token (``max_unauthenticated``),
  refused at once with a typed 503 and ``Retry-After``.
* :func:`read_body`: a request body must arrive whole within ``body_timeout``
  seconds (408 past it) and stay under ``max_body_bytes`` (413), checked while it
  streams; a caller that leaves mid-body raises starlette's ``ClientDisconnect``,
  which the servers answer with one log line, never a traceback.
* :class:`ProviderCalls`: the (synchronous) providers run on at most
  ``max_concurrent`` worker threads, each call under ``request_timeout``
  (:class:`~memvault.errors.UpstreamTimeout` past it); a call given up on keeps
  its thread, and its request its gate slots, until it returns.

Request heads (``body_timeout`` and 16 KiB) and bodies answered before they
arrived are bounded below the application, in the HTTP protocol both servers
run (:func:`memvault_http_remote.server.bounded_http_protocol`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Final, Protocol, TypeVar

import anyio
import anyio.to_thread
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memvault.contract.errors import InvalidRequest, MemvaultError, UpstreamError, UpstreamTimeout
from memvault.scanner.review import calling_as
from memvault_http_remote.errorwire import encode_error
from memvault_http_remote.settings import TokenEntry, TokenStore

__all__ = [
    "Admission",
    "HttpRefusal",
    "Limits",
    "ProviderCalls",
    "RequestGate",
    "read_body",
    "refusal_response",
]

_T = TypeVar("_T")

#: The scope key (a dict) where the gate and the servers keep what they know about a request.
SCOPE_KEY: Final = "memvault"


class Limits(Protocol):
    """The settings the limits read (``ServerSettings`` and the MCP server's ``HttpLimits`` both have them)."""

    @property
    def max_concurrent(self) -> int: ...
    @property
    def max_per_token(self) -> int: ...
    @property
    def max_unauthenticated(self) -> int: ...
    @property
    def body_timeout(self) -> float: ...
    @property
    def request_timeout(self) -> float: ...


class HttpRefusal(Exception):
    """Answer with ``status`` and the typed error body of ``error`` (and ``headers``)."""

    def __init__(self, status: int, error: MemvaultError, headers: dict[str, str] | None = None) -> None:
        super().__init__(str(error))
        self.status = status
        self.error = error
        self.headers = headers or {}


def refusal_response(status: int, error: MemvaultError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The typed JSON error body (:func:`~memvault_http_remote.errorwire.encode_error`) with ``status``."""
    return JSONResponse(encode_error(error), status_code=status, headers=headers)


# -- bodies --------------------------------------------------------------------------------------


def _declared_length(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The Content-Length's digits, or ``""`` (the HTTP parser has refused a malformed one already)."""
    for name, value in headers:
        if name.lower() == b"content-length":
            declared = value.decode("latin-1").strip()
            return declared if declared.isascii() and declared.isdigit() else ""
    return ""


async def read_body(
    receive: Receive, headers: Iterable[tuple[bytes, bytes]], *, max_bytes: int, timeout: float, prefix: str
) -> bytes:
    """A request's whole body, within ``timeout`` seconds and ``max_bytes`` bytes.

    :param prefix: where the settings live, for the messages (``server`` or ``http``).
    :raises HttpRefusal: 413 for a body over ``max_bytes`` (by its declared length, or as it
        streams), 408 with ``Connection: close`` for one that has not arrived within ``timeout``.
    :raises ClientDisconnect: the caller left before its body arrived.
    """
    too_large = HttpRefusal(
        413,
        InvalidRequest(
            f"request body is over the server's limit of {max_bytes} bytes ({prefix}.max_body_bytes): "
            "send less content per call",
            field="body",
        ),
    )
    digits = _declared_length(headers)
    if digits and (len(digits.lstrip("0")) > len(str(max_bytes)) or int(digits) > max_bytes):
        raise too_large
    chunks: list[bytes] = []
    size = 0
    try:
        # A body trickling in (or stalled) must not hold a connection, nor a concurrency slot, for long.
        with anyio.fail_after(timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect()
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > max_bytes:
                    raise too_large
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise HttpRefusal(
            408,
            InvalidRequest(
                f"the request body did not arrive within {timeout:g} s ({prefix}.body_timeout): send it at once",
                field="body",
            ),
            {"Connection": "close"},
        ) from None
    return b"".join(chunks)


# -- the gate ------------------------------------------------------------------------------------


class Admission:
    """One request the gate let in: the caller's key and bound, the slots it holds, its provider calls.

    Its slots (one, plus one per further item of a batch) go back when the request
    is over (answered, or its caller gone) *and* every provider call it started
    has returned. A call past the request timeout answers at once but runs on in
    its worker thread: until it returns it keeps the request's slots, so the calls
    running, abandoned ones included, stay within ``max_concurrent`` (and within
    the caller's own bound).
    """

    __slots__ = ("bound", "key", "over", "running", "setting", "slots")

    def __init__(self, key: str, bound: int, setting: str) -> None:
        self.key = key
        self.bound = bound
        self.setting = setting
        self.slots = 0
        self.running = 0
        self.over = False


def _always_counted(scope: Scope) -> bool:
    return False


class RequestGate:
    """Outermost ASGI layer: the concurrency bounds (typed 503 with ``Retry-After``) and one log line per request.

    Three bounds apply to every request the server counts: its total
    (``max_concurrent``), the caller's own (``max_per_token`` per token, or per
    peer address when the server runs without tokens), and one shared bound for
    every request without a valid token (``max_unauthenticated``). So one token
    holder with stalled uploads cannot take the slots other tenants need. A
    request holds its slots until it is over and its provider calls have
    returned (:class:`Admission`).

    :param exempt: requests that neither wait behind nor count against the bounds
        (``memvault serve``: health; ``memvault mcp``: the long-lived GET event stream
        of a session, which calls no provider and is bounded by the session caps).
    :param prefix: where the settings live, for the messages (``server`` or ``http``).
    :param log: the logger of the request lines.
    :param session: the token behind a request that authenticates otherwise than by its
        ``Authorization`` header (the console's session cookie), or ``None``: such a request
        counts against its token's bound, like a bearer request.
    """

    def __init__(
        self,
        app: ASGIApp,
        limits: Limits,
        tokens: TokenStore,
        *,
        exempt: Callable[[Scope], bool] = _always_counted,
        prefix: str = "server",
        log: logging.Logger | None = None,
        session: Callable[[Scope], TokenEntry | None] | None = None,
    ) -> None:
        self.app = app
        self.limits = limits
        self.tokens = tokens
        self.session = session
        self.exempt = exempt
        self.prefix = prefix
        self.log = log or logging.getLogger("memvault.serve")
        self.in_flight = 0
        self.per_client: dict[str, int] = {}
        #: Requests already over whose provider calls still run, holding their slots.
        self.outlived: set[Admission] = set()

    def _client(self, scope: Scope) -> tuple[str, int, str]:
        """The caller's key, its bound, and the setting that holds the bound."""
        if not self.tokens:
            client = scope.get("client")
            return f"peer:{client[0] if client else '-'}", self.limits.max_per_token, "max_per_token"
        header = ""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        scheme, _, token = header.partition(" ")
        entry = self.tokens.lookup(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if entry is None and self.session is not None:
            entry = self.session(scope)
        if entry is None:
            return "anonymous", self.limits.max_unauthenticated, "max_unauthenticated"
        return f"token:{entry.sha256}", self.limits.max_per_token, "max_per_token"

    def _take(self, admission: Admission, count: int) -> None:
        self.in_flight += count
        self.per_client[admission.key] = self.per_client.get(admission.key, 0) + count
        admission.slots += count

    def _settle(self, admission: Admission) -> None:
        """Give the request's slots back once it is over and its provider calls have returned."""
        if not admission.over:
            return
        if admission.running:
            self.outlived.add(admission)
            return
        self.outlived.discard(admission)
        count, admission.slots = admission.slots, 0
        if not count:
            return
        self.in_flight -= count
        left = self.per_client[admission.key] - count
        if left:
            self.per_client[admission.key] = left
        else:
            del self.per_client[admission.key]

    def _outlived_note(self, key: str | None = None) -> str:
        """For a refusal: how many of the slots are held by provider calls whose requests were answered."""
        held = sum(a.slots for a in self.outlived if key is None or a.key == key)
        if not held:
            return ""
        return (
            f" ({held} of them held by provider calls still running for requests already answered, "
            f"such as one past {self.prefix}.request_timeout: they count until they return)"
        )

    @staticmethod
    def admission(scope: Scope) -> Admission | None:
        """What the gate holds for the request of ``scope``; ``None`` when no gate admitted it."""
        admitted = scope.get(SCOPE_KEY, {}).get("gate")
        return admitted if isinstance(admitted, Admission) else None

    def call_started(self, scope: Scope) -> Admission | None:
        """A provider call of the request of ``scope`` starts: pair with :meth:`call_ended` when it returns."""
        admission = self.admission(scope)
        if admission is not None:
            admission.running += 1
        return admission

    def call_ended(self, admission: Admission) -> None:
        """A provider call :meth:`call_started` counted has returned (its thread is free)."""
        admission.running -= 1
        self._settle(admission)

    def reserve(self, scope: Scope, extra: int) -> None:
        """Count ``extra`` more requests in flight for the caller the gate admitted with ``scope``.

        For a batch, whose items past the first count as requests of their own:
        the caller's bound and the server's total apply to them as to separate
        requests. They go back with the request's own slot. A batch larger than the
        caller's bound (or the total) could never fit: the route refuses it with a
        400 before it gets here (see :meth:`batch_cap`).

        :raises HttpRefusal: 503 with ``Retry-After``, as the gate's own refusals, when they do not fit now.
        """
        admission = self.admission(scope)
        if admission is None:
            return  # not admitted by this gate (the app served without it): nothing counted
        key, bound, setting = admission.key, admission.bound, admission.setting
        items = extra + 1
        held = self.per_client.get(key, 0)
        total = self.limits.max_concurrent
        refusal = ""
        if self.in_flight + extra > total:
            refusal = (
                f"this batch of {items} items counts as {items} requests, which with the others in flight is "
                f"over the server's limit of {total} concurrent requests ({self.prefix}.max_concurrent)"
                f"{self._outlived_note()}: retry shortly, or send fewer items per batch"
            )
        elif held + extra > bound:
            who = "requests without a valid token have" if key == "anonymous" else "this client has"
            others = f" and {who} {held - 1} more in flight" if held > 1 else ""
            refusal = (
                f"this batch of {items} items counts as {items} requests{others}{self._outlived_note(key)}: "
                f"over the limit of {bound} ({self.prefix}.{setting}); wait for the others to finish, then retry"
            )
        if refusal:
            raise HttpRefusal(503, UpstreamError(refusal), {"Retry-After": "1"})
        self._take(admission, extra)

    def batch_cap(self, scope: Scope) -> tuple[int, str]:
        """The most requests one request of ``scope``'s caller can ever hold at once, and the setting that says so.

        The smaller of the caller's own bound and the server's total: a batch
        counting more could never be let in, however long its caller waited.
        """
        admission = self.admission(scope)
        bound, setting = (admission.bound, admission.setting) if admission else self._client(scope)[1:]
        if self.limits.max_concurrent < bound:
            return self.limits.max_concurrent, "max_concurrent"
        return bound, setting

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
            if self.exempt(scope):
                await self.app(scope, receive, send_logged)
                return
            admission = Admission(*self._client(scope))
            key, bound, setting = admission.key, admission.bound, admission.setting
            refusal = ""
            if self.in_flight >= self.limits.max_concurrent:
                refusal = (
                    f"the server is at its limit of {self.limits.max_concurrent} concurrent requests "
                    f"({self.prefix}.max_concurrent){self._outlived_note()}: retry shortly"
                )
            elif self.per_client.get(key, 0) >= bound:
                who = "requests without a valid token" if key == "anonymous" else "this client"
                refusal = (
                    f"{who} already have {bound} requests in flight ({self.prefix}.{setting})"
                    f"{self._outlived_note(key)}: wait for them to finish, then retry"
                )
            if refusal:
                response = refusal_response(503, UpstreamError(refusal), {"Retry-After": "1"})
                await response(scope, receive, send_logged)
                return
            scope.setdefault(SCOPE_KEY, {})["gate"] = admission
            self._take(admission, 1)
            try:
                await self.app(scope, receive, send_logged)
            finally:
                admission.over = True
                self._settle(admission)
        finally:
            client = scope.get("client")
            peer = f"{client[0]}:{client[1]}" if client else "-"
            token = scope.get(SCOPE_KEY, {}).get("token", "-")
            items = scope.get(SCOPE_KEY, {}).get("items")
            self.log.info(
                "%s %s %s %d %.1fms token=%s%s",
                peer,
                scope.get("method", "-"),
                scope.get("path", "-"),
                status,
                (time.perf_counter() - started) * 1000,
                token,
                "" if items is None else f" items={items}",
            )


# -- provider calls ------------------------------------------------------------------------------


def _caller_key(admission: Admission | None) -> str:
    """Who a provider call runs for, as :func:`memvault.scanner.review.current_caller` tells a reviewer: the
    token the gate counted it by, its digest shortened to 16 hex digits (a plugin may log it; it needs only
    equality). ``""`` without a token: an address is shared by every client behind one proxy or on one host,
    and a server without tokens has no tenants to be fair among."""
    if admission is None:
        return ""
    kind, _, rest = admission.key.partition(":")
    return f"token:{rest[:16]}" if kind == "token" else ""


class ProviderCalls:
    """Synchronous provider calls on worker threads: at most ``max_concurrent`` at once, each under a deadline.

    A thread cannot be stopped: a call its request gives up on (the deadline, or
    the caller leaving) runs on to its end. It keeps its thread-limiter token, and
    the request its slots in the gate, until it returns, so the provider calls
    running, abandoned ones included, never outnumber ``max_concurrent``; while
    they hold the slots, new requests get the gate's 503.
    """

    def __init__(
        self,
        limits: Limits,
        *,
        prefix: str = "server",
        what: str = "service",
        answered: str = "it was answered 504",
        log: logging.Logger | None = None,
    ) -> None:
        self.limits = limits
        self.answered = answered
        self.prefix = prefix
        self.what = what
        self.log = log or logging.getLogger("memvault.serve")
        self.limiter = anyio.CapacityLimiter(limits.max_concurrent)
        #: Provider calls running (the tasks that wait for their threads), abandoned ones included.
        self.running: set[asyncio.Task[Any]] = set()
        #: The gate whose slots the calls hold (set once the application is assembled).
        self.gate: RequestGate | None = None

    async def run(self, scope: Scope, func: Callable[[], _T], *, on_return: Callable[[], None] | None = None) -> _T:
        """``func()`` on a worker thread, waited for at most ``request_timeout`` seconds.

        :param on_return: called on the event loop when the thread returns (also after a timeout).
        :raises UpstreamTimeout: the call did not return in time (it runs on, holding its slots).
        """
        timeout = self.limits.request_timeout
        admission = self.gate.call_started(scope) if self.gate is not None else None
        started = time.monotonic()
        gave_up: list[str] = []  # why the request stopped waiting for the call, if it did
        caller = _caller_key(admission)

        def call() -> _T:
            with calling_as(caller):  # a reviewer shares its model by caller (memvault.scanner.review)
                return func()

        work = asyncio.get_running_loop().create_task(anyio.to_thread.run_sync(call, limiter=self.limiter))
        self.running.add(work)
        work.add_done_callback(lambda done: self._ended(done, admission, scope, started, gave_up, on_return))
        try:
            with anyio.fail_after(timeout):
                return await asyncio.shield(work)
        except TimeoutError:
            if not work.done():
                gave_up.append(self.answered)
            raise UpstreamTimeout(
                f"the provider did not answer within the {self.what}'s request timeout of {timeout:g} s; "
                f"retry later, or raise {self.prefix}.request_timeout"
            ) from None
        except BaseException:
            if not work.done():
                gave_up.append("its caller left")
            raise

    def _ended(
        self,
        work: asyncio.Task[Any],
        admission: Admission | None,
        scope: Scope,
        started: float,
        gave_up: list[str],
        on_return: Callable[[], None] | None,
    ) -> None:
        """A provider call returned: its request's slots may go back; one its request gave up on is logged."""
        self.running.discard(work)
        if admission is not None and self.gate is not None:
            self.gate.call_ended(admission)
        if on_return is not None:
            on_return()
        if work.cancelled():
            return  # the event loop is closing
        failure = work.exception()  # retrieved, whoever waits for it
        if gave_up:
            self.log.warning(
                "provider call on %s returned after %.1f s, after its request gave up on it (%s): %s",
                scope.get("path", "-"),
                time.monotonic() - started,
                gave_up[0],
                "it succeeded (a write it made has landed)"
                if failure is None
                else f"it failed ({type(failure).__name__})",
            )


def json_body(data: bytes) -> Any:
    """``data`` parsed as JSON; 400 (:class:`HttpRefusal`) when it is not."""
    try:
        return json.loads(data)
    except RecursionError:
        raise HttpRefusal(400, InvalidRequest("request body is nested too deeply", field="body")) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, and ints over 4300 digits
        reason = str(exc)[:200]
        raise HttpRefusal(400, InvalidRequest(f"request body is not valid JSON: {reason}", field="body")) from None
