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
* retain with ``mode="append"`` is not idempotent: it is retried only when the
  request provably was not applied — the TCP connection could not be opened
  (nothing was sent) or the service answered 503 from its concurrency gate
  (refused before the provider ran). A dropped connection or a 5xx after the
  request was sent raises ``UpstreamError`` at once: the append may or may not
  have happened, and only the caller can decide whether to read back and retry.
* health makes a single attempt under its own deadline (below 1000 ms).
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import threading
import time
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

from memvault.contract.errors import InvalidRequest, MemvaultError, UpstreamError, UpstreamTimeout
from memvault.contract.models import (
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
from memvault.contract.wire import structure, unstructure
from memvault.hooks.markers import hookimpl
from memvault_http_remote.errorwire import decode_error

__all__ = ["HEALTH_BUDGET", "HttpRemoteProvider"]

_R = TypeVar("_R")
#: Health answers within this many seconds, under the vault's 1.0 s remote deadline (P26).
HEALTH_BUDGET: Final = 0.8
_BACKOFF_FIRST: Final = 0.05
_BACKOFF_MAX: Final = 1.0
_RETRY_STATUS: Final = frozenset({502, 503})
#: Connections open at once per provider; a call past it waits (within its timeout) for one.
_MAX_CONNECTIONS: Final = 64
#: Idle connections kept for reuse.
_MAX_IDLE: Final = 32
#: An idle connection older than this is not reused (uvicorn closes idle ones after 5 s).
_KEEPALIVE: Final = 4.0


class _Retry(Exception):
    def __init__(self, error: MemvaultError) -> None:
        super().__init__(str(error))
        self.error = error


class _ConnectFailed(Exception):
    """The TCP (or TLS) connection could not be opened: nothing was sent. ``__cause__`` says why."""


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
    """

    def __init__(self, url: str, token: str = "", timeout: float = 10.0) -> None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidRequest(
                f"url {url!r} is not an http(s) URL: set url to the service's address, e.g. http://127.0.0.1:8765",
                field="url",
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InvalidRequest(f"timeout must be a positive number of seconds, got {timeout!r}", field="timeout")
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
        self._prefix = parts.path.rstrip("/")
        self._headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": "memvault-http-remote",
        }
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._pool = _Pool(parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80))

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
        conn = self._pool.acquire(timeout)
        try:
            conn.request(method, self._prefix + path, body=body, headers=self._headers)
            response = conn.getresponse()
            data = response.read()
        except BaseException as exc:
            self._pool.discard(conn)
            if isinstance(exc, ValueError) and not isinstance(exc, OSError):
                # http.client's parsing can let a ValueError through: it is a bad answer all the same.
                raise http.client.HTTPException(f"{type(exc).__name__}: {exc}") from exc
            raise
        if response.will_close:
            self._pool.discard(conn)
        else:
            self._pool.release(conn)
        return response.status, data

    def _attempt(self, verb: str, path: str, body: bytes, remaining: float, idempotent: bool) -> Any:
        where = self._where(verb)
        try:
            status, data = self._send("POST", path, body, remaining)
        except _ConnectFailed as exc:  # nothing was sent: always safe to retry
            cause = exc.__cause__
            if isinstance(cause, TimeoutError):
                raise _Retry(UpstreamTimeout(f"{where}: connecting timed out")) from cause
            raise _Retry(UpstreamError(f"{where}: cannot connect ({cause}); is `memvault serve` running?")) from cause
        except TimeoutError as exc:
            raise UpstreamTimeout(f"{where} did not answer within {self.timeout:g} s") from exc
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
        try:
            answer: object = json.loads(data)
        except ValueError:
            answer = None
        decoded = decode_error(status, answer, where)
        if status == 503 or (idempotent and status in _RETRY_STATUS):
            raise _Retry(decoded)
        raise decoded

    def _post(self, verb: str, path: str, payload: Any, *, idempotent: bool) -> Any:
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        deadline = time.monotonic() + self.timeout
        backoff = _BACKOFF_FIRST
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise UpstreamTimeout(f"{self._where(verb)} did not answer within {self.timeout:g} s")
            try:
                return self._attempt(verb, path, body, remaining, idempotent)
            except _Retry as retry:
                if time.monotonic() + backoff >= deadline:
                    raise retry.error from retry.__cause__
                time.sleep(backoff)
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

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> RetainResult:
        return self._call("retain", "/v1/retain", request, RetainResult, idempotent=request.mode is Mode.REPLACE)

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
            return str(data["provider"]), frozenset(str(c) for c in data["capabilities"])
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamError(f"{where} sent an answer memvault cannot read") from exc

    def close(self) -> None:
        """Close the pooled connections.

        :raises UpstreamError: closing a connection failed (the others are closed regardless).
        """
        try:
            self._pool.close()
        except OSError as exc:
            raise UpstreamError(f"{self._where('close')}: closing its connections failed ({exc})") from exc
