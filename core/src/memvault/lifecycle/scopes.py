"""Layer 6: scopes, scope keys and operation ids (contract L1-L4, L8).

A slot's scope resolves to a *scope key* (``memscope1_`` + base64url SHA-256
of a length-prefixed canonical encoding); the key is the slot's partition (the
``agent_id`` of every request its phases and tools make).

May import: :mod:`memvault.contract`.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from typing import Any, Final, Literal, Union

from memvault.contract.errors import InvalidRequest
from memvault.contract.lifecycle import ScopeContext

__all__ = [
    "OPERATION_ID_VERSION",
    "SCOPE_KEY_VERSION",
    "NamespaceSpec",
    "Scope",
    "ScopeResolver",
    "Visibility",
    "by_principal",
    "by_session",
    "by_value",
    "canonical_encoding",
    "check_slot_name",
    "length_prefixed",
    "namespace_bytes",
    "normalise_scope",
    "operation_id",
    "scope_key",
]

SCOPE_KEY_VERSION: Final = "memscope1"
OPERATION_ID_VERSION: Final = "memop1"
MAX_NAMESPACE_BYTES: Final = 1024
MAX_SCOPE_COMPONENTS: Final = 16
MAX_COMPONENT_BYTES: Final = 1024
MAX_ENCODING_BYTES: Final = 4096

_SLOT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_MAX_SLOT_NAME: Final = 64
Visibility = Literal["scope", "session"]

#: A scope: one string, or a tuple of 1-16 strings. ``None`` disables the slot.
Scope = Union[str, tuple[str, ...]]  # noqa: UP007 - a runtime alias on Python 3.10

ScopeResolver = Callable[[ScopeContext], Any]
NamespaceSpec = Union[str, Callable[[ScopeContext], Any], None]  # noqa: UP007 - a runtime alias on Python 3.10


def by_principal(ctx: ScopeContext) -> str | None:
    """The caller's principal as the scope; ``None`` (slot disabled) for anonymous callers (L2)."""
    return ctx.principal if ctx.principal else None


def by_session(ctx: ScopeContext) -> str:
    """The session id as the scope: memory that belongs to one conversation."""
    return ctx.session_id


def by_value(value: Scope) -> ScopeResolver:
    """A fixed scope for every caller (a shared team memory, say)."""
    normalise_scope(value)  # fail at configuration time, not at the first turn

    def resolve(ctx: ScopeContext) -> Scope:
        return value

    resolve.__name__ = f"by_value({value!r})"
    return resolve


def length_prefixed(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _component(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise InvalidRequest(
            f"{what} must be a string, got {type(value).__name__} (L3): scopes are strings or tuples of strings",
            field="scope",
        )
    if not value.strip():
        raise InvalidRequest(f"{what} is blank (L3): every scope component must be non-blank", field="scope")
    data = value.encode("utf-8", "surrogatepass")
    if len(data) > MAX_COMPONENT_BYTES:
        raise InvalidRequest(
            f"{what} is {len(data)} UTF-8 bytes, over the limit of {MAX_COMPONENT_BYTES} (L3)", field="scope"
        )
    return data


def normalise_scope(scope: object) -> Scope:
    if isinstance(scope, str):
        _component(scope, "scope")
        return scope
    if isinstance(scope, (tuple, list)):
        if not 1 <= len(scope) <= MAX_SCOPE_COMPONENTS:
            raise InvalidRequest(
                f"a scope tuple has {len(scope)} components (L3): use 1 to {MAX_SCOPE_COMPONENTS}", field="scope"
            )
        for index, part in enumerate(scope):
            _component(part, f"scope component {index}")
        return tuple(scope)
    raise InvalidRequest(
        f"scope must be a string or a tuple of strings, got {type(scope).__name__} (L3)", field="scope"
    )


def namespace_bytes(namespace: object) -> bytes:
    if not isinstance(namespace, str):
        raise InvalidRequest(f"namespace must be a string, got {type(namespace).__name__} (L3)", field="namespace")
    if not namespace.strip():
        raise InvalidRequest("namespace is blank (L3): set a non-blank namespace, or none", field="namespace")
    data = namespace.encode("utf-8", "surrogatepass")
    if len(data) > MAX_NAMESPACE_BYTES:
        raise InvalidRequest(
            f"namespace is {len(data)} UTF-8 bytes, over the limit of {MAX_NAMESPACE_BYTES} (L3)", field="namespace"
        )
    return data


def canonical_encoding(namespace: str | None, scope: Scope) -> bytes:
    """The length-prefixed canonical encoding of a namespace and a scope (L3-L4).

    ``namespace``: ``b"-"`` when absent, else ``b"n"`` + 4-byte big-endian length + UTF-8.
    ``scope``: a string is ``b"s"`` + length-prefixed UTF-8; a tuple is ``b"t"`` +
    2-byte count + each component length-prefixed, so ``"a"`` and ``("a",)`` differ.

    :raises InvalidRequest: naming the L3 rule the namespace or scope breaks.
    """
    ns = b"-" if namespace is None else b"n" + length_prefixed(namespace_bytes(namespace))
    scope = normalise_scope(scope)
    if isinstance(scope, str):
        body = b"s" + length_prefixed(_component(scope, "scope"))
    else:
        body = (
            b"t"
            + len(scope).to_bytes(2, "big")
            + b"".join(length_prefixed(_component(p, "scope component")) for p in scope)
        )
    encoding = ns + body
    if len(encoding) > MAX_ENCODING_BYTES:
        raise InvalidRequest(
            f"namespace and scope encode to {len(encoding)} bytes, over the combined limit of "
            f"{MAX_ENCODING_BYTES} (L3): use fewer or shorter components",
            field="scope",
        )
    return encoding


def _digest(version: str, payload: bytes) -> str:
    raw = hashlib.sha256(version.encode("ascii") + b"\x00" + payload).digest()
    return f"{version}_" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def scope_key(
    slot: str,
    namespace: str | None,
    scope: Scope,
    *,
    visibility: Visibility = "scope",
    session_id: str = "",
) -> str:
    """The versioned, deterministic scope key of a slot's scope (L4).

    ``memscope1_`` + base64url (no padding) SHA-256 over the slot name, the
    visibility (and the session id under ``session`` visibility) and
    :func:`canonical_encoding`. It is 53 characters and a valid identifier,
    so it is used directly as the partition's ``agent_id``.
    """
    check_slot_name(slot)
    head = length_prefixed(slot.encode("utf-8"))
    if visibility == "session":
        head += b"S" + length_prefixed(session_id.encode("utf-8"))
    elif visibility == "scope":
        head += b"A"
    else:
        raise InvalidRequest(f"visibility {visibility!r} is not 'scope' or 'session' (L1)", field="visibility")
    return _digest(SCOPE_KEY_VERSION, head + canonical_encoding(namespace, scope))


def operation_id(session_id: str, sequence: int, turn: int | None, phase: str, slot: str) -> str:
    """The versioned, stable id of one phase of one slot (L8): ``memop1_`` + base64url SHA-256.

    ``sequence`` is the session's compaction epoch (0 until the first
    compaction completes); ``turn`` is ``None`` for standalone compaction.
    """
    turn_part = "standalone" if turn is None else f"turn:{turn}"
    payload = b"".join(length_prefixed(p.encode("utf-8")) for p in (session_id, str(sequence), turn_part, phase, slot))
    return _digest(OPERATION_ID_VERSION, payload)


def check_slot_name(name: object) -> str:
    if not isinstance(name, str) or not _SLOT_NAME.fullmatch(name) or len(name) > _MAX_SLOT_NAME:
        raise InvalidRequest(
            f"slot name {name!r} is invalid (L1): use a letter then letters, digits, '_' or '-' "
            f"(at most {_MAX_SLOT_NAME} characters)",
            field="name",
        )
    return name
