"""The ``http-remote`` provider: the memvault verbs over HTTP to a ``memvault serve``.

One pooled :class:`httpx.Client` per provider instance (thread-safe). Failures
map onto :mod:`memvault.errors`: a refused or dropped connection and any 5xx are
:class:`~memvault.errors.UpstreamError`, a timeout is
:class:`~memvault.errors.UpstreamTimeout`, and a typed error body becomes the
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

import json
import socket
import time
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import httpx

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


class _Retry(Exception):
    def __init__(self, error: MemvaultError) -> None:
        super().__init__(str(error))
        self.error = error


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
        self.url = url.rstrip("/")
        self.timeout = float(timeout)
        self._headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": "memvault-http-remote",
        }
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        # The httpx transport directly, not an httpx.Client: the client's cookie jar,
        # redirect and auth machinery and per-call URL merging cost more CPU than the
        # rest of a loopback round trip, and the service uses none of them. The
        # transport keeps httpx's connection pool (thread-safe) and exception types.
        self._transport = httpx.HTTPTransport(
            # Small request/response pairs: without TCP_NODELAY, Nagle's algorithm can hold
            # the body back behind the headers until the peer ACKs them.
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32, keepalive_expiry=30.0),
        )
        self._urls: dict[str, httpx.URL] = {}

    # -- transport ---------------------------------------------------------------

    def _where(self, verb: str) -> str:
        return f"memvault service at {self.url} ({verb})"

    def _send(self, method: str, path: str, body: bytes | None, timeout: float) -> httpx.Response:
        """One HTTP exchange, the whole response read; raises httpx's transport errors."""
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = httpx.URL(self.url + path)
        request = httpx.Request(
            method,
            url,
            content=body,
            headers=self._headers,
            extensions={"timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}},
        )
        response = self._transport.handle_request(request)
        try:
            response.read()
        finally:
            response.close()
        return response

    def _attempt(self, verb: str, path: str, body: bytes, remaining: float, idempotent: bool) -> Any:
        where = self._where(verb)
        try:
            response = self._send("POST", path, body, remaining)
        except httpx.ConnectTimeout as exc:
            raise _Retry(UpstreamTimeout(f"{where}: connecting timed out")) from exc
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"{where} did not answer within {self.timeout:g} s") from exc
        except httpx.ConnectError as exc:  # nothing was sent: always safe to retry
            raise _Retry(UpstreamError(f"{where}: cannot connect ({exc}); is `memvault serve` running?")) from exc
        except httpx.TransportError as exc:
            error = UpstreamError(f"{where}: the connection failed mid-request ({type(exc).__name__}: {exc})")
            if idempotent:
                raise _Retry(error) from exc
            raise error from exc
        if response.status_code == 200:
            try:
                return response.json()
            except ValueError as exc:
                raise UpstreamError(f"{where} answered 200 with a body that is not JSON") from exc
        try:
            answer: object = response.json()
        except ValueError:
            answer = None
        decoded = decode_error(response.status_code, answer, where)
        if response.status_code == 503 or (idempotent and response.status_code in _RETRY_STATUS):
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
            response = self._send("GET", "/v1/health", None, budget)
        except httpx.TimeoutException:
            return HealthStatus(ok=False, message="health check timeout")
        except httpx.ConnectError as exc:
            return HealthStatus(ok=False, message=f"{where}: connection refused or unreachable ({exc})")
        except httpx.TransportError as exc:
            return HealthStatus(ok=False, message=f"{where}: the connection failed ({type(exc).__name__})")
        if response.status_code in (401, 403):
            return HealthStatus(ok=False, message=f"{where} rejected the token: check or renew it")
        if response.status_code != 200:
            return HealthStatus(ok=False, message=f"{where} answered HTTP {response.status_code}")
        try:
            return structure(response.json(), HealthStatus, what="health response")
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
        return [structure(item, QuarantineRecord, what="quarantine record") for item in records]

    @hookimpl
    def memvault_quarantine_get(self, workspace_id: str, sha256: str) -> QuarantineRecord | None:
        data = self._post(
            "quarantine get",
            "/v1/quarantine/get",
            {"workspace_id": workspace_id, "sha256": sha256},
            idempotent=True,
        )
        record = data.get("record") if isinstance(data, dict) else None
        return None if record is None else structure(record, QuarantineRecord, what="quarantine record")

    # -- extras --------------------------------------------------------------------

    def remote_capabilities(self) -> tuple[str, frozenset[str]]:
        """The server's provider name and the capabilities it declares (``GET /v1/capabilities``)."""
        where = self._where("capabilities")
        try:
            response = self._send("GET", "/v1/capabilities", None, self.timeout)
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"{where} did not answer within {self.timeout:g} s") from exc
        except httpx.TransportError as exc:
            raise UpstreamError(f"{where}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            try:
                body: object = response.json()
            except ValueError:
                body = None
            raise decode_error(response.status_code, body, where)
        try:
            data = response.json()
            return str(data["provider"]), frozenset(str(c) for c in data["capabilities"])
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamError(f"{where} sent an answer memvault cannot read") from exc

    def close(self) -> None:
        """Close the pooled connections."""
        self._transport.close()
