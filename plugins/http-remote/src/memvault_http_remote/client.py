"""The ``http-remote`` provider: the memvault verbs over HTTP to a ``memvault serve``.

One pool of keep-alive connections per provider instance (thread-safe), on the
standard library's :mod:`http.client`. Failures map onto :mod:`memvault.errors`
here, in every hook and in ``close`` (no transport exception leaves the
provider): a refused or dropped connection and any 5xx are
:class:`~memvault.errors.UpstreamError`, a timeout is
:class:`~memvault.errors.UpstreamTimeout`, each naming the operation with the
transport's exception chained as ``__cause__``; a typed error body becomes the
class the server's provider raised (``InvalidRequest``, ``CapExceeded`` with its
numbers, ``ContentRejected``, ``NotSupported``, ``Unauthorized``).

Retries, all inside the one ``timeout`` budget, with exponential backoff:

* recall, read, forget, list documents, retain with ``mode="replace"`` and the quarantine calls are
  idempotent: retried after a connection failure, a dropped connection, a 502
  or a 503.
* a retain carrying an ``idempotency_key`` (contract P44) is safe to repeat: the service
  answers a repeat with the first write's result and writes nothing. It is retried after a
  connection failure, a connection dropped after the request was sent, a 502, a 503 or a
  504, with exponential backoff and jitter, until ``retry_deadline`` seconds (default 10)
  have passed since the call began (each attempt within ``timeout``). When the service's
  provider records keys (``idempotent_writes`` in ``GET /v1/capabilities``, asked once and
  remembered), the client gives every retain without a key one of its own (``mv-`` and a
  random uuid4), so every append is retried safely. A key sent to a service whose provider
  does not record keys is :class:`~memvault.errors.NotSupported`, never a write that is
  silently not idempotent. A 4xx is never retried.
* retain with ``mode="append"`` and no key is not idempotent: it is retried only when the
  request provably was not applied — the TCP connection could not be opened
  (nothing was sent) or the service answered 503 from its concurrency gate
  (refused before the provider ran). A dropped connection or a 5xx after the
  request was sent raises ``UpstreamError`` at once: the append may or may not
  have happened, and only the caller can decide whether to read back and retry.
* health makes a single attempt under its own deadline (below 1000 ms).

Coalescing appends (``batch_max``, default 14; 0 or 1 turns it off): a retain
that finds no other retain of this client in flight goes out alone to
``/v1/retain``, at once. One that finds one in flight waits in a queue; when the
request in flight returns, the first waiting thread sends everything queued (up
to ``batch_max``) as one ``POST /v1/retain/batch`` and every thread gets its own
result or raises its own typed error, rebuilt as for ``/v1/retain``. So at most
one retain request per client is in flight, and the service commits a batch in
one transaction (contract P34). The thread that sends a batch as another one
answers waits up to ``_LINGER`` (1 ms) for the threads that one answered, in
case they come straight back with their next retain: the batch then goes out
full instead of alternating full and nearly empty ones. A retain that finds
nothing in flight and no batch answered within that millisecond never waits.
The threads' appends go out marked ``"independent"`` (their order does not
matter, so a service whose provider commits each retain alone runs them at
once); ``Vault.retain_many``'s own list goes out in order, ``batch_max`` per
request, outside the queue. A batch is retried as a single retain is
(connection failures when every item is a replace; never after an append may
have been applied). A batch the service refuses as a whole before running it
(404 or 405 from a service without the route, remembered for the client's
lifetime; 400, 413 or 503) is sent again as single requests, one per thread, so
each item gets exactly what ``/v1/retain`` answers. After a 400 for a batch the
client reads the most items the service takes (its OpenAPI document's
``maxItems``, computed from its settings) and lowers ``batch_max`` to it, so it
never again sends a batch the service can never take. A waiting thread waits at
most the ``timeout`` of the request in flight plus its own batch's, then raises
``UpstreamTimeout`` (saying whether its append was sent).
"""

from __future__ import annotations

import contextlib
import heapq
import http.client
import json
import math
import os
import random
import select
import socket
import ssl
import threading
import time
import uuid
from collections import deque
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import attrs

from memvault import telemetry
from memvault.contract.errors import InvalidRequest, MemvaultError, NotSupported, UpstreamError, UpstreamTimeout
from memvault.contract.forking import after_fork_in_child
from memvault.contract.models import (
    Capability,
    ForgetRequest,
    ForgetResult,
    HealthStatus,
    ListDocumentsRequest,
    ListDocumentsResult,
    Mode,
    QuarantineRecord,
    ReadRequest,
    ReadResult,
    RecallRequest,
    RecallResult,
    RetainRequest,
    RetainResult,
)
from memvault.contract.retention import SweepRequest, SweepResult
from memvault.contract.wire import structure, unstructure
from memvault.hooks.markers import hookimpl
from memvault_http_remote.errorwire import decode_error

__all__ = ["DEFAULT_RETRY_DEADLINE", "HEALTH_BUDGET", "HttpRemoteProvider"]

_R = TypeVar("_R")
#: Health answers within this many seconds, under the vault's 1.0 s remote deadline (P26).
HEALTH_BUDGET: Final = 0.8
_BACKOFF_FIRST: Final = 0.05
_BACKOFF_MAX: Final = 1.0
_RETRY_STATUS: Final = frozenset({502, 503})
#: What a write with an idempotency key is retried after: the service or a proxy before it failed or timed out.
_KEYED_RETRY_STATUS: Final = frozenset({502, 503, 504})
#: How long a write with an idempotency key is retried by default (seconds, from the call's start).
DEFAULT_RETRY_DEADLINE: Final = 10.0
#: Connections open at once per provider; a call past it waits (within its timeout) for one.
_MAX_CONNECTIONS: Final = 64
#: Idle connections kept for reuse.
_MAX_IDLE: Final = 32
#: An idle connection older than this is not reused (uvicorn closes idle ones after 5 s).
_KEEPALIVE: Final = 4.0
#: Retains a client sends in one ``/v1/retain/batch`` by default.
DEFAULT_BATCH_MAX: Final = 14
#: Statuses that refuse a whole batch before anything of it ran: its items go out alone instead.
#: 404/405: a service without the route; 400: the batch's form (too many items); 413: too large; 503: the gate.
_BATCH_REFUSED: Final = frozenset({400, 404, 405, 413, 503})
#: The longest a handed-over batch waits to fill up before it goes (seconds).
_LINGER: Final = 0.001
#: Slack over a batch's ``timeout`` for the threads waiting on it (hand-over and scheduling).
_HAND_OVER: Final = 1.0


class _Retry(Exception):
    def __init__(self, error: MemvaultError) -> None:
        super().__init__(str(error))
        self.error = error


class _ConnectFailed(Exception):
    """The TCP (or TLS) connection could not be opened: nothing was sent. ``__cause__`` says why."""


class _BatchRefused(Exception):
    """The service refused a whole batch before running any of it (status in ``_BATCH_REFUSED``)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class _SendAlone:
    """The outcome that tells a waiting thread to send its retain to ``/v1/retain`` itself."""


_ALONE: Final = _SendAlone()
#: What a waiting thread is given: its result, the error to raise, or "send it yourself".
_Outcome = RetainResult | MemvaultError | _SendAlone


class _Pending:
    """One thread's retain while batching is on: the request, then its outcome.

    Every field but ``request`` is read and written under the provider's condition's lock.
    """

    __slots__ = ("batch", "deadline", "led", "outcome", "request", "taken", "wake")

    def __init__(self, request: RetainRequest, lock: threading.Lock) -> None:
        self.request = request
        #: Notified (under ``lock``, the provider's) when this thread has an outcome or is to send: waking
        #: only the threads concerned, not every queued one, keeps the hand-over short.
        self.wake = threading.Condition(lock)
        #: ``None`` until decided: a result, the error to raise, or :data:`_ALONE`.
        self.outcome: _Outcome | None = None
        #: Set on the one thread that sends: the pending retains it sends (itself first).
        self.batch: list[_Pending] | None = None
        #: Until when the thread waits (``time.monotonic``).
        self.deadline = 0.0
        #: Whether a batch carries it (it may have been sent).
        self.taken = False
        #: How many retains its batch may wait for (see ``_fill``); 0: it goes at once.
        self.led = 0


def _clone(exc: MemvaultError) -> MemvaultError:
    """A copy of ``exc`` for another thread to raise (one instance raised in two threads would mix tracebacks)."""
    cls = type(exc)
    copy = cls.__new__(cls, *exc.args)
    copy.__dict__.update(exc.__dict__)
    copy.args = exc.args
    copy.__cause__ = exc.__cause__
    copy.__suppress_context__ = exc.__suppress_context__
    return copy


class _Watchdog:
    """One thread a process that shuts the connections of calls past their deadline.

    A shut socket wakes the thread blocked reading it (closing it would not). A call registers its
    connection with :meth:`watch` and ends with :meth:`done`, which says whether the deadline cut it; the
    thread starts with the first call, and a forked child starts its own.
    """

    def __init__(self) -> None:
        self._forked()
        if hasattr(os, "register_at_fork"):  # not on Windows, which does not fork
            os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self._turn = threading.Condition()
        #: [deadline, order, connection, state]: state 0 running, 1 done, 2 cut.
        self._heap: list[list[Any]] = []
        self._order = 0
        self._thread: threading.Thread | None = None

    def watch(self, deadline: float, conn: http.client.HTTPConnection) -> list[Any]:
        """Shut ``conn`` at ``deadline`` unless :meth:`done` comes first."""
        with self._turn:
            self._order += 1
            entry = [deadline, self._order, conn, 0]
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="memvault-http-deadlines", daemon=True)
                self._thread.start()
            elif self._heap[0] is entry:
                self._turn.notify()
            return entry

    def done(self, entry: list[Any]) -> bool:
        """The call of ``entry`` is over: whether the deadline cut its connection."""
        with self._turn:
            cut = bool(entry[3] == 2)
            entry[3] = 1
            entry[2] = None
            while self._heap and self._heap[0][3] == 1:  # calls mostly end in the order they began
                heapq.heappop(self._heap)
            return cut

    def _run(self) -> None:
        while True:
            with self._turn:
                while self._heap and self._heap[0][3] == 1:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._turn.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._turn.wait(wait)
                    continue
                entry = heapq.heappop(self._heap)
                entry[3] = 2
                conn = entry[2]
            sock = getattr(conn, "sock", None)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG: Final = _Watchdog()


class _Pool:
    """Keep-alive connections to one service: thread-safe, the most recently used first.

    The standard library's :mod:`http.client` rather than httpx: per call, httpx's
    request and response models and its pure-Python HTTP parser cost about twice the
    client CPU of ``http.client``, which also sends a request's head and body in one
    segment. An idle connection the server has closed (readable: EOF) is dropped
    before reuse, as httpx does, so a keep-alive timeout on the server does not
    fail a call.
    """

    def __init__(self, scheme: str, host: str, port: int) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.idle: list[tuple[http.client.HTTPConnection, float]] = []
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        self.tls = ssl.create_default_context() if scheme == "https" else None

    def acquire(self, timeout: float) -> http.client.HTTPConnection:
        """A connection, reused when one is idle; the caller must :meth:`release` or :meth:`discard` it.

        :raises TimeoutError: no connection slot became free within ``timeout``.
        :raises _ConnectFailed: the connection could not be opened (nothing was sent).
        """
        if not self.slots.acquire(timeout=timeout):
            raise TimeoutError(f"all {_MAX_CONNECTIONS} connections stayed busy")
        try:
            now = time.monotonic()
            while True:
                with self.lock:
                    if not self.idle:
                        break
                    conn, since = self.idle.pop()
                if now - since < _KEEPALIVE and conn.sock is not None and not _readable(conn.sock):
                    conn.sock.settimeout(timeout)
                    return conn
                conn.close()
            conn = (
                http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.tls)
                if self.tls is not None
                else http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            )
            try:
                conn.connect()
                if conn.sock is not None:
                    # Without TCP_NODELAY, Nagle's algorithm can hold a small request back.
                    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, ValueError) as exc:  # ValueError: UnicodeError for a host IDNA cannot encode
                conn.close()
                raise _ConnectFailed(str(exc)) from exc
            return conn
        except BaseException:
            self.slots.release()
            raise

    def release(self, conn: http.client.HTTPConnection) -> None:
        """Back to the pool after a complete exchange."""
        with self.lock:
            if len(self.idle) < _MAX_IDLE:
                self.idle.append((conn, time.monotonic()))
                conn = None  # type: ignore[assignment]
        if conn is not None:
            conn.close()
        self.slots.release()

    def discard(self, conn: http.client.HTTPConnection) -> None:
        """Close a connection whose exchange failed (or that the server will close)."""
        try:
            conn.close()
        finally:
            self.slots.release()

    def forked(self) -> None:
        """In a forked child: the idle connections' sockets are the parent's too (a request sent on one
        could read the parent's answer), so none is used again; the locks and slots are new."""
        self.idle = []  # collected: closing a copy of a socket leaves the parent's open
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)

    def close(self) -> None:
        """Close the idle connections; a busy one is closed when its call returns it.

        :raises OSError: the first failure; every connection is closed regardless.
        """
        with self.lock:
            idle, self.idle = self.idle, []
        failure: OSError | None = None
        for conn, _ in idle:
            try:
                conn.close()
            except OSError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure


def _recall_by_meaning(data: Any) -> tuple[str, str] | None:
    """``recall_by_meaning`` of a ``GET /v1/capabilities`` answer as ``(embedder, model_id)``; ``None`` when it
    is ``null`` or absent (a service older than the field recalls by words).

    :raises TypeError: the field is there but not an object of two strings.
    """
    meaning = data.get("recall_by_meaning")
    if meaning is None:
        return None
    embedder, model_id = meaning["embedder"], meaning["model_id"]
    if not isinstance(embedder, str) or not isinstance(model_id, str):
        raise TypeError("recall_by_meaning names no embedder")
    return embedder, model_id


def _readable(sock: socket.socket) -> bool:
    """Whether an idle connection has something to read: the server closed it (or misbehaves)."""
    try:
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class HttpRemoteProvider:
    """Talks to a memvault service.

    :param url: the service's base URL, e.g. ``http://127.0.0.1:8765``.
    :param token: the bearer token (empty for a service running without tokens).
    :param timeout: seconds a call may take in total, retries included.
    :param batch_max: appends (and replaces) that threads issue while one of this client's retains is in
        flight are sent together, up to this many per ``POST /v1/retain/batch``; 0 or 1 sends each alone.
    :param retry_deadline: seconds a retain with an idempotency key is retried for, from the call's start,
        after connection failures and 502/503/504 (each attempt waits at most ``timeout``).
    """

    def __init__(
        self,
        url: str,
        token: str = "",
        timeout: float = 10.0,
        batch_max: int = DEFAULT_BATCH_MAX,
        retry_deadline: float = DEFAULT_RETRY_DEADLINE,
    ) -> None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidRequest(
                f"url {url!r} is not an http(s) URL: set url to the service's address, e.g. http://127.0.0.1:8765",
                field="url",
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise InvalidRequest(
                f"timeout must be a positive, finite number of seconds, got {timeout!r}", field="timeout"
            )
        if (
            isinstance(retry_deadline, bool)
            or not isinstance(retry_deadline, (int, float))
            or not 0 < retry_deadline < math.inf
        ):
            raise InvalidRequest(
                f"retry_deadline must be a positive, finite number of seconds, got {retry_deadline!r}",
                field="retry_deadline",
            )
        if isinstance(batch_max, bool) or not isinstance(batch_max, int) or batch_max < 0:
            raise InvalidRequest(
                f"batch_max must be a whole number >= 0 (0 or 1: no batching), got {batch_max!r}", field="batch_max"
            )
        try:
            port = parts.port
        except ValueError:
            port = -1
        if port == -1 or not parts.hostname:
            raise InvalidRequest(
                f"url {url!r} has no valid host and port: set url to the service's address, e.g. http://127.0.0.1:8765",
                field="url",
            )
        if any(c <= " " or c == "\x7f" for c in parts.path):
            raise InvalidRequest(
                f"url {url!r} has spaces or control characters in its path: percent-encode them", field="url"
            )
        if not isinstance(token, str) or not all(" " <= c <= "~" for c in token):
            raise InvalidRequest(
                "token must be printable ASCII (it travels in the Authorization header): check its value",
                field="token",
            )
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self.retry_deadline = float(retry_deadline)
        #: The service's provider's capabilities, once ``GET /v1/capabilities`` answered (``None``: not yet).
        self._service_capabilities: frozenset[str] | None = None
        #: The embedder the service's recall ranks by meaning with, from the same answer (``None``: by words).
        self._service_embedder: tuple[str, str] | None = None
        self._prefix = parts.path.rstrip("/")
        self._headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": "memvault-http-remote",
        }
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._pool = _Pool(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80))
        self.batch_max = batch_max
        # Coalescing retains: one lock and one condition for all of its state.
        self._retains_lock = threading.Lock()
        self._retains = threading.Condition(self._retains_lock)
        self._retaining = False  # a retain request of this client is in flight
        self._queue: deque[_Pending] = deque()
        self._batch_route = True
        #: The sender waiting for its batch to fill, and how many it waits for (see _fill).
        self._filling: tuple[_Pending, int] | None = None
        #: When the last batch answered with nothing queued behind it, and how many threads it answered.
        self._answered: tuple[float, int] = (0.0, 0)  # False once the service answered 404/405 for /v1/retain/batch
        after_fork_in_child(self, HttpRemoteProvider._forked)

    def _forked(self) -> None:
        """In a forked child: new connections, and the parent's queued retains left to the parent."""
        random.seed()  # the child's jitter is its own
        self._pool.forked()
        self._retains_lock = threading.Lock()
        self._retains = threading.Condition(self._retains_lock)
        self._retaining = False
        self._queue = deque()
        self._filling = None

    # -- transport ---------------------------------------------------------------

    def _where(self, verb: str) -> str:
        return f"memvault service at {self.url} ({verb})"

    def _send(self, method: str, path: str, body: bytes | None, timeout: float) -> tuple[int, bytes]:
        """One HTTP exchange, the whole response read: its status and body.

        :raises _ConnectFailed: the connection could not be opened (nothing was sent).
        :raises TimeoutError: no answer (or no free connection) within ``timeout``.
        :raises OSError: the connection failed mid-request.
        :raises http.client.HTTPException: the answer is not HTTP, or stopped short.
        """
        deadline = time.monotonic() + timeout
        conn = self._pool.acquire(timeout)
        # The socket's timeout bounds each read, not the answer: a server (or a proxy) sending it a byte at a
        # time would hold the call as long as it liked. At the deadline the watchdog shuts the connection.
        watch = _WATCHDOG.watch(deadline, conn)
        try:
            conn.request(method, self._prefix + path, body=body, headers=telemetry.inject_headers(self._headers))
            response = conn.getresponse()
            data = response.read()
        except BaseException as exc:
            self._pool.discard(conn)
            if _WATCHDOG.done(watch) and isinstance(exc, (OSError, ValueError, http.client.HTTPException)):
                raise TimeoutError(f"no whole answer within {timeout:g} s") from exc
            if isinstance(exc, ValueError) and not isinstance(exc, OSError):
                # http.client's parsing can let a ValueError through: it is a bad answer all the same.
                raise http.client.HTTPException(f"{type(exc).__name__}: {exc}") from exc
            raise
        if _WATCHDOG.done(watch):  # shut at the deadline: what was read may have ended there, not at its end
            self._pool.discard(conn)
            raise TimeoutError(f"no whole answer within {timeout:g} s")
        if response.will_close:
            self._pool.discard(conn)
        else:
            self._pool.release(conn)
        return response.status, data

    def _attempt(
        self,
        verb: str,
        path: str,
        body: bytes,
        remaining: float,
        idempotent: bool,
        batch: bool = False,
        retry_status: frozenset[int] = _RETRY_STATUS,
    ) -> Any:
        where = self._where(verb)
        try:
            status, data = self._send("POST", path, body, remaining)
        except _ConnectFailed as exc:  # nothing was sent: always safe to retry
            cause = exc.__cause__
            if isinstance(cause, TimeoutError):
                raise _Retry(UpstreamTimeout(f"{where}: connecting timed out")) from cause
            raise _Retry(UpstreamError(f"{where}: cannot connect ({cause}); is `memvault serve` running?")) from cause
        except TimeoutError as exc:
            timeout = UpstreamTimeout(f"{where} did not answer within {self.timeout:g} s")
            if idempotent and 504 in retry_status:  # a keyed write: its repeat is answered, never applied twice
                raise _Retry(timeout) from exc
            raise timeout from exc
        except (OSError, http.client.HTTPException) as exc:
            error = UpstreamError(f"{where}: the connection failed mid-request ({type(exc).__name__}: {exc})")
            if idempotent:
                raise _Retry(error) from exc
            raise error from exc
        if status == 200:
            try:
                return json.loads(data)
            except ValueError as exc:
                raise UpstreamError(f"{where} answered 200 with a body that is not JSON") from exc
        if batch and status in _BATCH_REFUSED:
            raise _BatchRefused(status)
        try:
            answer: object = json.loads(data)
        except ValueError:
            answer = None
        decoded = decode_error(status, answer, where)
        if status == 503 or (idempotent and status in retry_status):
            raise _Retry(decoded)
        raise decoded

    def _post(
        self, verb: str, path: str, payload: Any, *, idempotent: bool, batch: bool = False, keyed: bool = False
    ) -> Any:
        with telemetry.client_span("POST", self._prefix + path, self._pool.host, self._pool.port):
            return self._post_retrying(verb, path, payload, idempotent=idempotent, batch=batch, keyed=keyed)

    def _post_retrying(
        self, verb: str, path: str, payload: Any, *, idempotent: bool, batch: bool, keyed: bool = False
    ) -> Any:
        """``_post``'s body: the call, tried again while the answer says so and time remains.

        :param keyed: every retain of the write carries an idempotency key: also retried after a
            connection dropped mid-request and a 504, until ``retry_deadline``.
        """
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        started = time.monotonic()
        deadline = started + self.timeout
        # A keyed write is tried again while retry_deadline has not passed; each attempt has its timeout.
        retry_until = started + self.retry_deadline if keyed else deadline
        retry_status = _KEYED_RETRY_STATUS if keyed else _RETRY_STATUS
        backoff = _BACKOFF_FIRST
        while True:
            if keyed:
                deadline = max(deadline, time.monotonic() + self.timeout)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise UpstreamTimeout(f"{self._where(verb)} did not answer within {self.timeout:g} s")
            try:
                return self._attempt(verb, path, body, remaining, idempotent or keyed, batch, retry_status)
            except _Retry as retry:
                if time.monotonic() + backoff >= retry_until:
                    raise retry.error from retry.__cause__
                # Jitter: clients that failed together do not all come back at the same moment.
                time.sleep(backoff * (0.5 + random.random() / 2))
                backoff = min(backoff * 2, _BACKOFF_MAX)

    def _call(self, verb: str, path: str, request: object, result_type: type[_R], *, idempotent: bool) -> _R:
        data = self._post(verb, path, unstructure(request), idempotent=idempotent)
        return self._read(verb, data, result_type)

    def _read(self, verb: str, data: object, result_type: type[_R]) -> _R:
        """``data`` as ``result_type``; an answer that does not fit is the service's fault, not the caller's."""
        try:
            return structure(data, result_type, what=f"{verb} response")
        except InvalidRequest as exc:
            raise UpstreamError(f"{self._where(verb)} sent a response memvault cannot read: {exc}") from exc

    # -- verbs -------------------------------------------------------------------

    def service_capabilities(self) -> frozenset[str] | None:
        """The capabilities of the service's provider (``GET /v1/capabilities``), asked once and remembered;
        ``None`` while the service cannot be asked (asked again next time). A service without the route or
        with an answer that names none has none."""
        if self._service_capabilities is None:
            try:
                status, raw = self._send("GET", "/v1/capabilities", None, self.timeout)
            except (_ConnectFailed, OSError, http.client.HTTPException):
                return None
            if status not in (200, 404, 405):
                return None  # a token refused, the service failing: ask again next time
            try:
                data = json.loads(raw) if status == 200 else {"capabilities": []}
                names = frozenset(str(c) for c in data["capabilities"])
                self._service_embedder = _recall_by_meaning(data)
                self._service_capabilities = names
            except (ValueError, KeyError, TypeError):
                self._service_capabilities = frozenset()
        return self._service_capabilities

    def recall_embedder(self) -> tuple[str, str] | None:
        """The embedder the service ranks this client's recalls by meaning with, as ``(name, model_id)``
        (``recall_by_meaning`` in ``GET /v1/capabilities``; contract P36), or ``None`` when the service
        recalls by words alone, as a service too old to send the field does. Asked once with the
        capabilities and remembered (a service restarted with another embedder is noticed by a new client).

        A hit found by meaning alone has ``lexical == 0`` (P39); the parity suite asks this to know which
        recalls may return such hits.

        :raises UpstreamError: the service cannot be asked now (``UpstreamTimeout``, ``Unauthorized`` as
            :meth:`remote_capabilities` raises them); asked again next time.
        """
        if self.service_capabilities() is None:
            self.remote_capabilities()  # raises what went wrong, or answers now and remembers it
        return self._service_embedder

    def honours_idempotency_keys(self) -> bool:
        """Whether the service's provider records idempotency keys (P44), so a retain may carry one."""
        capabilities = self.service_capabilities()
        return capabilities is not None and Capability.IDEMPOTENT_WRITES in capabilities

    def _keyed(self, request: RetainRequest) -> RetainRequest:
        """``request`` with an idempotency key when the service records them: retrying it is then safe.

        :raises NotSupported: the request carries a key and the service's provider records none.
        """
        if request.idempotency_key:
            capabilities = self.service_capabilities()
            if capabilities is not None and Capability.IDEMPOTENT_WRITES not in capabilities:
                raise NotSupported(
                    f"{self._where('retain')}: its provider does not record idempotency keys (no "
                    f"'{Capability.IDEMPOTENT_WRITES}' capability), so a write with idempotency_key "
                    f"{request.idempotency_key!r} could be applied twice: send it without a key, or serve a "
                    "provider that records them (memory, sqlite, postgres, local-disk)"
                )
            return request
        if not self.honours_idempotency_keys():
            return request
        return attrs.evolve(request, idempotency_key=f"mv-{uuid.uuid4().hex}")

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        request = self._keyed(request)
        if self.batch_max <= 1 or not self._batch_route:
            return self._retain_one(request)
        me = _Pending(request, self._retains_lock)
        with self._retains:
            if self._retaining:
                me.deadline = time.monotonic() + 2 * self.timeout + _HAND_OVER
                self._queue.append(me)
                filling = self._filling
                if filling is not None and len(filling[0].batch or ()) + len(self._queue) >= filling[1]:
                    filling[0].wake.notify()
                self._await_turn(me)
            else:
                self._retaining = True
                me.batch = [me]
                at, answered = self._answered
                if answered > 1 and time.monotonic() - at < _LINGER:
                    # The threads of a batch that just answered are coming back: go out with them.
                    me.led = min(answered, self.batch_max)
        if me.batch is not None:
            if me.led > len(me.batch):
                self._fill(me.batch, me.led)
            self._send_turn(me.batch)
        outcome = me.outcome
        if isinstance(outcome, _SendAlone):
            return self._retain_one(request)
        if isinstance(outcome, MemvaultError):
            raise outcome
        assert isinstance(outcome, RetainResult)
        return outcome

    @hookimpl
    def memvault_retain_many(self, requests: list[RetainRequest]) -> list[RetainResult | MemvaultError]:
        """``Vault.retain_many``: the list in order, ``batch_max`` retains per ``POST /v1/retain/batch``."""
        outcomes: list[RetainResult | MemvaultError] = []
        keyed: list[RetainRequest | MemvaultError] = []
        for request in requests:
            try:
                keyed.append(self._keyed(request))
            except MemvaultError as exc:
                keyed.append(exc)
        if any(isinstance(k, MemvaultError) for k in keyed):
            # A key the service cannot honour fails that item alone; the others go out as they would.
            answers = iter(self.memvault_retain_many([k for k in keyed if isinstance(k, RetainRequest)]))
            return [k if isinstance(k, MemvaultError) else next(answers) for k in keyed]
        requests = [k for k in keyed if isinstance(k, RetainRequest)]
        size = max(1, self.batch_max)
        for start in range(0, len(requests), size):
            chunk = requests[start : start + size]
            sent: list[_Outcome] = [_ALONE] * len(chunk)
            if len(chunk) > 1 and self._batch_route:
                sent = self._send_batch([_Pending(request, self._retains_lock) for request in chunk], independent=False)
            for request, outcome in zip(chunk, sent, strict=True):
                if isinstance(outcome, _SendAlone):
                    try:
                        outcome = self._retain_one(request)
                    except MemvaultError as exc:
                        outcome = exc
                outcomes.append(outcome)
        return outcomes

    def _retain_one(self, request: RetainRequest) -> RetainResult:
        data = self._post(
            "retain",
            "/v1/retain",
            unstructure(request),
            idempotent=request.mode is Mode.REPLACE,
            keyed=bool(request.idempotency_key),
        )
        return self._read("retain", data, RetainResult)

    def _await_turn(self, me: _Pending) -> None:
        """Wait (holding the condition) until ``me`` has an outcome or is to send a batch, or its wait ends."""
        while me.outcome is None and me.batch is None:
            remaining = me.deadline - time.monotonic()
            if remaining > 0:
                me.wake.wait(remaining)
                continue
            where = self._where("retain")
            if me.taken:
                me.outcome = UpstreamTimeout(
                    f"{where}: the batch carrying this retain did not answer within {self.timeout:g} s; "
                    "it may or may not have been applied"
                )
            else:
                self._queue.remove(me)
                me.outcome = UpstreamTimeout(
                    f"{where}: this retain waited {2 * self.timeout + _HAND_OVER:g} s for this client's retains "
                    "before it and was not sent"
                )

    def _fill(self, batch: list[_Pending], target: int) -> None:
        """Wait up to ``_LINGER`` for the queue to bring ``batch`` to ``target`` retains (the threads the
        last batch answered are on their way back), then take what is queued: fewer, fuller batches."""
        deadline = time.monotonic() + _LINGER
        leader = batch[0]
        with self._retains:
            while len(batch) + len(self._queue) < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._filling = (leader, target)
                leader.wake.wait(remaining)
            self._filling = None
            batch.extend(self._take(self.batch_max - len(batch)))

    def _take(self, count: int) -> list[_Pending]:
        """Up to ``count`` queued retains, oldest first, now carried by a batch (call holding the condition).

        Each then waits for that batch's answer: ``timeout`` plus the hand-over slack.
        """
        taken = [self._queue.popleft() for _ in range(min(max(count, 0), len(self._queue)))]
        until = time.monotonic() + self.timeout + _HAND_OVER
        for pending in taken:
            pending.taken = True
            pending.deadline = max(pending.deadline, until)
        return taken

    def _send_turn(self, batch: list[_Pending]) -> None:
        """Send ``batch`` (the calling thread's own retain first), then hand the turn to the next queued."""
        failure: BaseException | None = None
        outcomes: list[_Outcome] = []
        try:
            if len(batch) == 1:
                try:
                    outcomes = [self._retain_one(batch[0].request)]
                except MemvaultError as exc:
                    outcomes = [exc]
            else:
                outcomes = self._send_batch(batch)
        except BaseException as exc:
            failure = exc
            if not isinstance(exc, Exception):
                raise  # KeyboardInterrupt and the like: every waiter still gets an error below
        finally:
            self._hand_over(batch, outcomes, failure)

    def _hand_over(self, batch: list[_Pending], outcomes: list[_Outcome], failure: BaseException | None) -> None:
        """Every retain of ``batch`` gets its outcome; the queued ones become the next batch (or go alone).

        A waiter that gave up (its wait ended) keeps the timeout it raised.
        """
        with self._retains:
            woken = list(batch)
            for pending, outcome in zip(batch, outcomes, strict=False):
                if pending.outcome is None:
                    pending.outcome = outcome
            for pending in batch:
                if pending.outcome is None:
                    reason = f"{type(failure).__name__}: {failure}" if failure is not None else "no answer"
                    error = UpstreamError(f"{self._where('retain')}: sending the batch failed ({reason})")
                    error.__cause__ = failure
                    pending.outcome = error
            if self._queue and not self._batch_route:
                for pending in self._queue:
                    pending.outcome = _ALONE
                woken.extend(self._queue)
                self._queue.clear()
            if self._queue:
                taken = self._take(self.batch_max)
                taken[0].batch = taken
                # The threads answered now may come back for this batch too.
                taken[0].led = min(self.batch_max, len(taken) + len(batch))
                woken.append(taken[0])
            else:
                self._retaining = False
                self._answered = (time.monotonic(), len(batch))
            for pending in woken:
                pending.wake.notify()

    def _send_batch(self, batch: list[_Pending], *, independent: bool = True) -> list[_Outcome]:
        """One ``POST /v1/retain/batch``: an outcome for each pending retain, in order.

        :param independent: the retains come from threads that did not wait for one another, so the
            service may run them at once (``retain_many``'s own list is not: its order counts).
        """
        where = self._where("retain")
        payload: dict[str, Any] = {"items": [unstructure(pending.request) for pending in batch]}
        if independent:
            payload["independent"] = True
        idempotent = all(pending.request.mode is Mode.REPLACE for pending in batch)
        keyed = all(pending.request.idempotency_key for pending in batch)
        try:
            data = self._post("retain", "/v1/retain/batch", payload, idempotent=idempotent, batch=True, keyed=keyed)
        except _BatchRefused as refused:
            if refused.status in (404, 405):
                self._batch_route = False  # an older service: every retain goes alone from now on
            elif refused.status == 400 and len(batch) > 1:
                self._learn_batch_limit(len(batch))
            return [_ALONE for _ in batch]
        except MemvaultError as exc:
            return [exc if index == 0 else _clone(exc) for index in range(len(batch))]
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list) or len(results) != len(batch):
            unreadable = f"{where} sent a batch answer memvault cannot read (not a list of {len(batch)} results)"
            return [UpstreamError(unreadable) for _ in batch]
        return [self._item_outcome(p.request, item, where) for p, item in zip(batch, results, strict=True)]

    def _learn_batch_limit(self, refused: int) -> None:
        """A batch of ``refused`` retains was a 400: lower ``batch_max`` to the service's published limit.

        The service's OpenAPI document states the most items a batch may carry with its
        settings (``maxItems``: no more than a token may have in flight). A service whose
        ``max_per_token`` is under this client's ``batch_max`` refuses every full batch
        with a 400 that could never change; from now on the batches fit. Anything
        unreadable leaves ``batch_max`` as it was (the items still go alone).
        """
        try:
            status, raw = self._send("GET", "/v1/openapi.json", None, self.timeout)
            if status != 200:
                return
            document: Any = json.loads(raw)
            schema = document["components"]["schemas"]["RetainBatchRequest"]["properties"]["items"]
            limit = schema["maxItems"]
        except (_ConnectFailed, OSError, http.client.HTTPException, ValueError, KeyError, TypeError):
            return
        if isinstance(limit, int) and not isinstance(limit, bool) and 1 <= limit < min(refused, self.batch_max + 1):
            self.batch_max = limit

    def _item_outcome(self, request: RetainRequest, item: object, where: str) -> _Outcome:
        """One entry of a batch's ``results``: the result, or the error ``/v1/retain`` would have raised."""
        if isinstance(item, dict) and "result" in item:
            try:
                return self._read("retain", item["result"], RetainResult)
            except MemvaultError as exc:
                return exc
        status = item.get("status") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not isinstance(status, int) or isinstance(status, bool):
            return UpstreamError(f"{where} sent a batch result memvault cannot read: {item!r}"[:300])
        if request.mode is Mode.REPLACE and status in _RETRY_STATUS:
            return _ALONE  # /v1/retain retries a replace after these: so does its own request
        if request.idempotency_key and status in _KEYED_RETRY_STATUS:
            return _ALONE  # and a keyed write after these (a repeat is answered, never applied twice)
        return decode_error(status, item, where)

    @hookimpl
    def memvault_recall(self, request: RecallRequest) -> RecallResult:
        return self._call("recall", "/v1/recall", request, RecallResult, idempotent=True)

    @hookimpl
    def memvault_read(self, request: ReadRequest) -> ReadResult:
        return self._call("read", "/v1/read", request, ReadResult, idempotent=True)

    @hookimpl
    def memvault_forget(self, request: ForgetRequest) -> ForgetResult:
        return self._call("forget", "/v1/forget", request, ForgetResult, idempotent=True)

    @hookimpl
    def memvault_list_documents(self, request: ListDocumentsRequest) -> ListDocumentsResult:
        return self._call("list documents", "/v1/documents/list", request, ListDocumentsResult, idempotent=True)

    @hookimpl
    def memvault_health(self) -> HealthStatus:
        budget = min(HEALTH_BUDGET, self.timeout)
        where = self._where("health")
        try:
            status, data = self._send("GET", "/v1/health", None, budget)
        except _ConnectFailed as exc:
            if isinstance(exc.__cause__, TimeoutError):
                return HealthStatus(ok=False, message="health check timeout")
            return HealthStatus(ok=False, message=f"{where}: connection refused or unreachable ({exc.__cause__})")
        except TimeoutError:
            return HealthStatus(ok=False, message="health check timeout")
        except (OSError, http.client.HTTPException) as exc:
            return HealthStatus(ok=False, message=f"{where}: the connection failed ({type(exc).__name__})")
        if status in (401, 403):
            return HealthStatus(ok=False, message=f"{where} rejected the token: check or renew it")
        if status != 200:
            return HealthStatus(ok=False, message=f"{where} answered HTTP {status}")
        try:
            return structure(json.loads(data), HealthStatus, what="health response")
        except (ValueError, InvalidRequest):
            return HealthStatus(ok=False, message=f"{where} sent a health answer memvault cannot read")

    # -- quarantine pass-through (the server's provider keeps the copies) ---------

    @hookimpl
    def memvault_quarantine_keep(self, record: QuarantineRecord) -> bool | None:
        data = self._post("quarantine keep", "/v1/quarantine/keep", unstructure(record), idempotent=True)
        return bool(data.get("kept")) if isinstance(data, dict) else None

    @hookimpl
    def memvault_quarantine_list(self, workspace_id: str) -> list[QuarantineRecord] | None:
        data = self._post("quarantine list", "/v1/quarantine/list", {"workspace_id": workspace_id}, idempotent=True)
        records = data.get("records") if isinstance(data, dict) else None
        if records is None:
            return None
        if not isinstance(records, list):
            raise UpstreamError(f"{self._where('quarantine list')} sent records that are not a list")
        return [self._read("quarantine list", item, QuarantineRecord) for item in records]

    @hookimpl
    def memvault_quarantine_get(self, workspace_id: str, sha256: str) -> QuarantineRecord | None:
        data = self._post(
            "quarantine get",
            "/v1/quarantine/get",
            {"workspace_id": workspace_id, "sha256": sha256},
            idempotent=True,
        )
        record = data.get("record") if isinstance(data, dict) else None
        return None if record is None else self._read("quarantine get", record, QuarantineRecord)

    # -- memory over time (P41-P45) -----------------------------------------------------

    @hookimpl
    def memvault_sweep_expired(self, request: SweepRequest) -> SweepResult:
        """A service sweeps its own store (``memvault serve`` runs its vault's background sweep, under the
        service's own policy): a client sweeping it would apply the client's policy to every tenant's data.

        :raises NotSupported: always, saying where to run the sweep.
        """
        raise NotSupported(
            f"{self._where('sweep')}: a service sweeps its own store in the background (its [retention] "
            "sweep_interval), under its own policy; to sweep now, run `memvault retention apply` with the "
            "service's config, where the service runs"
        )

    # -- extras --------------------------------------------------------------------

    def remote_capabilities(self) -> tuple[str, frozenset[str]]:
        """The server's provider name and the capabilities it declares (``GET /v1/capabilities``)."""
        where = self._where("capabilities")
        try:
            status, raw = self._send("GET", "/v1/capabilities", None, self.timeout)
        except _ConnectFailed as exc:
            cause = exc.__cause__
            if isinstance(cause, TimeoutError):
                raise UpstreamTimeout(f"{where}: connecting timed out") from cause
            raise UpstreamError(f"{where}: cannot connect ({cause}); is `memvault serve` running?") from cause
        except TimeoutError as exc:
            raise UpstreamTimeout(f"{where} did not answer within {self.timeout:g} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise UpstreamError(f"{where}: {type(exc).__name__}: {exc}") from exc
        if status != 200:
            try:
                body: object = json.loads(raw)
            except ValueError:
                body = None
            raise decode_error(status, body, where)
        try:
            data = json.loads(raw)
            name, names = str(data["provider"]), frozenset(str(c) for c in data["capabilities"])
            embedder = _recall_by_meaning(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamError(f"{where} sent an answer memvault cannot read") from exc
        self._service_embedder = embedder
        self._service_capabilities = names
        return name, names

    def close(self) -> None:
        """Close the pooled connections.

        :raises UpstreamError: closing a connection failed (the others are closed regardless).
        """
        try:
            self._pool.close()
        except OSError as exc:
            raise UpstreamError(f"{self._where('close')}: closing its connections failed ({exc})") from exc
