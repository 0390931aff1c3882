"""Errors on the wire: ``{"error": {"type": ..., "message": ..., "field": ..., <extra attrs>}}``.

The service encodes a :mod:`memvault.errors` instance into a status code and a
typed body; the client decodes the body back into the same class, with the
same attributes, so callers branch with ``except CapExceeded`` whether the
provider is local or remote.
"""

from __future__ import annotations

from typing import Any, Final

from memvault.errors import (
    CapExceeded,
    ContentRejected,
    InvalidRequest,
    MemvaultError,
    NotSupported,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
)

__all__ = ["decode_error", "encode_error", "status_for"]

#: HTTP status per error class; the body's ``type`` is what the client trusts.
_STATUS: Final[tuple[tuple[type[MemvaultError], int], ...]] = (
    (InvalidRequest, 400),
    (Unauthorized, 403),
    (CapExceeded, 409),
    (ContentRejected, 422),
    (NotSupported, 422),
    (UpstreamTimeout, 504),
    (UpstreamError, 502),
)


def status_for(exc: MemvaultError) -> int:
    """The HTTP status the service answers ``exc`` with (500 for a provider bug)."""
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def encode_error(exc: MemvaultError, *, message: str | None = None) -> dict[str, Any]:
    """The JSON body for ``exc``: its class name, message and the attributes callers branch on."""
    body: dict[str, Any] = {"type": _wire_type(exc), "message": message if message is not None else str(exc)}
    if isinstance(exc, InvalidRequest):
        body["field"] = exc.field
    elif isinstance(exc, CapExceeded):
        body.update(tier=exc.tier, cap=exc.cap, projected=exc.projected, current=exc.current)
    elif isinstance(exc, ContentRejected):
        body.update(category=exc.category, pattern=exc.pattern, sha256=exc.sha256)
    return {"error": body}


def _wire_type(exc: MemvaultError) -> str:
    for cls in (
        InvalidRequest,
        CapExceeded,
        ContentRejected,
        NotSupported,
        Unauthorized,
        UpstreamTimeout,
        UpstreamError,
    ):
        if isinstance(exc, cls):
            return cls.__name__
    return "ServiceError"


def decode_error(status: int, payload: object, where: str) -> MemvaultError:
    """Rebuild the error the service's provider raised from a non-2xx response.

    :param status: the HTTP status.
    :param payload: the decoded JSON body (anything: a proxy may answer HTML).
    :param where: "memvault service at URL (verb)" for messages about the transport.
    """
    body = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        if status in (401, 403):
            return Unauthorized(f"{where} refused the credential (HTTP {status}): check the token")
        if status == 504:
            return UpstreamTimeout(f"{where} timed out upstream (HTTP 504)")
        if status >= 500:
            return UpstreamError(f"{where} failed with HTTP {status}")
        return UpstreamError(f"{where} answered HTTP {status} without a memvault error body")
    kind = body["type"]
    message = str(body.get("message", ""))
    try:
        if kind == "InvalidRequest":
            return InvalidRequest(message, field=str(body.get("field", "")))
        if kind == "CapExceeded":
            return CapExceeded(
                tier=str(body["tier"]),
                cap=int(body["cap"]),
                projected=int(body["projected"]),
                current=int(body["current"]),
            )
        if kind == "ContentRejected":
            exc = ContentRejected(
                category=str(body["category"]), pattern=str(body["pattern"]), sha256=str(body["sha256"])
            )
            exc.args = (message,) if message else exc.args
            return exc
    except (KeyError, TypeError, ValueError):
        return UpstreamError(f"{where} sent a malformed {kind} error body: {body!r}"[:500])
    if kind == "NotSupported":
        return NotSupported(message)
    if kind == "Unauthorized" or status in (401, 403):
        return Unauthorized(message or f"{where} refused the credential (HTTP {status})")
    if kind == "UpstreamTimeout":
        return UpstreamTimeout(f"{where}: {message}")
    return UpstreamError(f"{where}: {message}" if message else f"{where} failed with HTTP {status}")
