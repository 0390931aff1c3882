"""Errors on the wire: ``{"error": {"type": ..., "message": ..., <the error's attributes>}}``.

The service encodes a :mod:`memvault.errors` instance into a status code and a
typed body; the client decodes the body back into the same class, with the
same attributes, so callers branch with ``except CapExceeded`` whether the
provider is local or remote.

Nothing here lists the hierarchy by hand: :data:`WIRE_TYPES` walks the
subclasses of :class:`~memvault.errors.MemvaultError` defined in
:mod:`memvault.errors`, and an error's wire attributes are the parameters of
its ``__init__`` (each stored under the same name), so a new error class or a
new attribute travels without a change to this module.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Final

from memvault.contract import errors as _errors
from memvault.contract.errors import (
    CapExceeded,
    ContentRejected,
    IdempotencyConflict,
    InvalidRequest,
    MemvaultError,
    NotSupported,
    Unauthorized,
    UpstreamError,
    UpstreamTimeout,
)

__all__ = ["WIRE_TYPES", "decode_error", "encode_error", "status_for", "wire_fields"]

#: The ``type`` of a body for an error that is not a memvault error (a bug in the service).
SERVICE_ERROR: Final = "ServiceError"


def _walk(cls: type[MemvaultError]) -> list[type[MemvaultError]]:
    found = [cls] if cls.__module__ == _errors.__name__ else []
    for sub in cls.__subclasses__():
        found += [c for c in _walk(sub) if c not in found]
    return found


#: Every class of :mod:`memvault.errors`, by the name the body's ``type`` carries.
WIRE_TYPES: Final[dict[str, type[MemvaultError]]] = {cls.__name__: cls for cls in _walk(MemvaultError)}

#: HTTP status per error class (the nearest class in the MRO decides); the body's
#: ``type`` is what the client trusts. Anything else is a 500 (a provider bug).
_STATUS: Final[dict[type[MemvaultError], int]] = {
    InvalidRequest: 400,
    Unauthorized: 403,
    CapExceeded: 409,
    IdempotencyConflict: 409,
    ContentRejected: 422,
    NotSupported: 422,
    UpstreamTimeout: 504,
    UpstreamError: 502,
}


def status_for(exc: MemvaultError) -> int:
    """The HTTP status the service answers ``exc`` with (500 for a provider bug)."""
    for cls in type(exc).__mro__:
        if cls in _STATUS:
            return _STATUS[cls]
    return 500


def wire_fields(cls: type[MemvaultError]) -> dict[str, inspect.Parameter]:
    """The attributes ``cls`` carries over the wire: its ``__init__`` parameters but ``message``."""
    if not _own_init(cls):
        return {}
    params = inspect.signature(cls.__init__).parameters
    return {n: p for n, p in params.items() if n not in ("self", "message") and p.kind is not p.VAR_POSITIONAL}


def _own_init(cls: type[MemvaultError]) -> bool:
    """Whether ``cls`` takes memvault's own ``__init__`` (not Exception's or OSError's ``*args``)."""
    owner = next(c for c in cls.__mro__ if "__init__" in vars(c))
    return owner.__module__ == _errors.__name__


def _wire_class(exc: MemvaultError) -> type[MemvaultError] | None:
    for cls in type(exc).__mro__:
        if WIRE_TYPES.get(cls.__name__) is cls:
            return cls
    return None


def encode_error(exc: MemvaultError, *, message: str | None = None) -> dict[str, Any]:
    """The JSON body for ``exc``: its class name, its message and every attribute callers branch on."""
    cls = _wire_class(exc)
    body: dict[str, Any] = {
        "type": cls.__name__ if cls is not None else SERVICE_ERROR,
        "message": message if message is not None else str(exc),
    }
    for name in wire_fields(cls) if cls is not None else {}:
        value = getattr(exc, name)
        body[name] = list(value) if isinstance(value, (tuple, list)) else value
    return {"error": body}


def _typed(value: object, hint: object) -> bool:
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if typing.get_origin(hint) is list:
        return isinstance(value, list) and all(_typed(v, typing.get_args(hint)[0]) for v in value)
    return True


def _as_declared(value: object, hint: object) -> object:
    """JSON has no tuples: a list comes back as the tuple the attribute was (``span``)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if isinstance(value, list) and any(typing.get_origin(o) is tuple for o in options):
        return tuple(value)
    return value


def _rebuild(cls: type[MemvaultError], body: dict[str, Any], message: str) -> MemvaultError:
    """``cls`` built from the body's attributes, its message the server's own.

    :raises ValueError: when an attribute is missing (and has no default) or has the wrong type.
    """
    own = _own_init(cls)
    hints = typing.get_type_hints(cls.__init__) if own else {}
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    init_params = inspect.signature(cls.__init__).parameters if own else {}
    for name, param in init_params.items():
        if name == "self":
            continue
        if name == "message":
            value: Any = message
        elif name in body:
            value = body[name]
            if not _typed(value, hints.get(name)):
                raise ValueError(f"attribute {name!r} has the wrong type")
            value = _as_declared(value, hints.get(name))
        elif param.default is not param.empty:
            continue
        else:
            raise ValueError(f"attribute {name!r} is missing")
        if param.kind is param.KEYWORD_ONLY:
            kwargs[name] = value
        else:
            args.append(value)
    exc = cls(*args, **kwargs) if init_params else cls(message)
    if message:
        exc.args = (message,)
    return exc


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
    cls = WIRE_TYPES.get(kind)
    if cls is None:
        if status in (401, 403):
            return Unauthorized(message or f"{where} refused the credential (HTTP {status})")
        return UpstreamError(f"{where}: {message}" if message else f"{where} failed with HTTP {status}")
    if issubclass(cls, UpstreamError):
        # Transport-side context helps the operator; the attributes (none) are unchanged.
        message = f"{where}: {message}" if message else f"{where} failed with HTTP {status}"
    try:
        return _rebuild(cls, body, message)
    except (TypeError, ValueError):
        return UpstreamError(f"{where} sent a malformed {kind} error body: {body!r}"[:500])
