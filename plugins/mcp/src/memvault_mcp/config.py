"""The MCP server's configuration: which slots it serves, and for whom.

A TOML file (``memvault mcp --slots mcp.toml``)::

    # mcp.toml
    workspace = "acme"          # default workspace of every slot
    principal = "dana"          # stdio: whose memory a by-principal slot holds (HTTP: the token's name)

    [[slots]]
    name = "profile"
    description = "Long-term facts about the user."
    provider = "sqlite"                      # default: the provider of memvault.toml
    options = { path = "profile.db" }        # default: memvault.toml's [providers.<name>]
    scope = "principal"                      # principal | session | value (then: value = "...")
    kind = "memory"                          # memory | notes

    [http]                                   # --transport http only; every key optional
    body_timeout = 5.0                       # seconds for a request's head, then its whole body; 408 past it
    max_body_bytes = 4194304                 # 413 above this, checked while the body streams
    request_timeout = 30.0                   # seconds a provider may take per MCP request; timeout error past it
    max_concurrent = 64                      # requests in flight (and provider threads) in total; 503 past it
    max_per_token = 16                       # requests in flight per token (per peer without tokens); 503 past it
    max_unauthenticated = 8                  # requests in flight without a valid token; 503 past it
    max_per_slot = 16                        # tool calls in flight per slot; a tool error past it
    max_sessions = 1024                      # stateful MCP sessions open in total; 503 past it
    max_sessions_per_token = 32              # stateful MCP sessions open per token; 429 past it
    session_idle_timeout = 300.0             # seconds a session may stay idle before it is closed

Unknown keys are rejected with the key named; every error is an
:class:`memvault.InvalidRequest` that says how to fix it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from attrs import field, frozen

from memvault import InvalidRequest
from memvault.contract.wire import structure

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "DEFAULT_PRINCIPAL",
    "DEFAULT_SLOT",
    "HttpLimits",
    "ServerConfig",
    "SlotConfig",
    "load_server_config",
    "parse_server_config",
]

#: The principal of a stdio server when none is configured: one local user.
DEFAULT_PRINCIPAL: Final = "local"
#: The slot served when the configuration names none.
DEFAULT_SLOT: Final = "memory"

ScopeKind = Literal["principal", "session", "value"]
_SCOPES: Final = ("principal", "session", "value")
_SLOT_KEYS: Final = (
    "name",
    "description",
    "provider",
    "options",
    "workspace",
    "scope",
    "value",
    "namespace",
    "visibility",
    "kind",
    "recall_limit",
)
_TOP_KEYS: Final = ("workspace", "principal", "tokens_file", "slots", "http")


@frozen(kw_only=True)
class SlotConfig:
    """One slot the server exposes (see :class:`memvault.lifecycle.Slot` for each field's meaning).

    ``provider`` empty: the provider of ``memvault.toml``; ``options`` are its
    settings (merged over ``memvault.toml``'s ``[providers.<name>]``).
    ``scope``: ``principal`` (the caller: the configured principal over stdio,
    the token's name over HTTP), ``session`` (one MCP session), or ``value``
    (the fixed ``value``, shared by every caller).
    """

    name: str
    description: str = ""
    provider: str = ""
    options: Mapping[str, Any] = field(factory=dict)
    workspace: str = ""
    scope: ScopeKind = "principal"
    value: str = ""
    namespace: str | None = None
    visibility: Literal["scope", "session"] = "scope"
    kind: Literal["memory", "notes"] = "memory"
    recall_limit: int = 5


def _positive(instance: object, attribute: Any, value: Any) -> None:
    # `not 0 < value < inf`: nan (which TOML allows) fails it too, as does inf (a timeout that never ends).
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise InvalidRequest(
            f"[http] {attribute.name} must be a positive, finite number, got {value!r}", field=attribute.name
        )


@frozen(kw_only=True)
class HttpLimits:
    """The ``[http]`` table: the limits ``memvault mcp --transport http`` holds its callers to.

    The request limits are those of ``memvault serve`` (the same implementation,
    :mod:`memvault_http_remote.limits`); ``max_per_slot`` and the session limits are
    the MCP server's own. docs/agent-builders/mcp.md says what a client sees past each.
    """

    body_timeout: float = field(default=5.0, validator=_positive)
    max_body_bytes: int = field(default=4 * 1024 * 1024, validator=_positive)
    request_timeout: float = field(default=30.0, validator=_positive)
    max_concurrent: int = field(default=64, validator=_positive)
    max_per_token: int = field(default=16, validator=_positive)
    max_unauthenticated: int = field(default=8, validator=_positive)
    max_per_slot: int = field(default=16, validator=_positive)
    max_sessions: int = field(default=1024, validator=_positive)
    max_sessions_per_token: int = field(default=32, validator=_positive)
    session_idle_timeout: float = field(default=300.0, validator=_positive)


@frozen(kw_only=True)
class ServerConfig:
    """What ``memvault mcp`` serves."""

    slots: tuple[SlotConfig, ...]
    workspace: str = "default"
    principal: str = DEFAULT_PRINCIPAL
    tokens_file: str = ""
    source: str = ""
    http: HttpLimits = field(factory=HttpLimits)


def _where(source: str, index: int | None = None) -> str:
    place = source or "mcp config"
    return f"{place} [[slots]] #{index + 1}" if index is not None else place


def _string(table: Mapping[str, Any], key: str, where: str, *, default: str = "") -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        raise InvalidRequest(f"{where}: {key!r} must be a string, got {type(value).__name__}", field=key)
    return value


def _choice(table: Mapping[str, Any], key: str, where: str, choices: tuple[str, ...], default: str) -> str:
    value = _string(table, key, where, default=default)
    if value not in choices:
        raise InvalidRequest(
            f"{where}: {key!r} is {value!r}; use one of {', '.join(choices)}",
            field=key,
        )
    return value


def _slot(table: object, index: int, source: str) -> SlotConfig:
    where = _where(source, index)
    if not isinstance(table, Mapping):
        raise InvalidRequest(f"{where} must be a table ([[slots]] with name = ...)", field="slots")
    unknown = sorted(str(k) for k in table if k not in _SLOT_KEYS)
    if unknown:
        raise InvalidRequest(
            f"{where}: unknown key(s) {', '.join(unknown)}; a slot takes {', '.join(_SLOT_KEYS)}", field=unknown[0]
        )
    if "name" not in table:
        raise InvalidRequest(f"{where}: 'name' is required (the tools are named <name>__read, ...)", field="name")
    options = table.get("options", {})
    if not isinstance(options, Mapping):
        raise InvalidRequest(f"{where}: 'options' must be a table of provider settings", field="options")
    scope = _choice(table, "scope", where, _SCOPES, "principal")
    value = _string(table, "value", where)
    if scope == "value" and not value.strip():
        raise InvalidRequest(f'{where}: scope = "value" needs value = "..." (the shared scope)', field="value")
    if scope != "value" and value:
        raise InvalidRequest(f"{where}: 'value' is only read with scope = \"value\"", field="value")
    namespace = table.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise InvalidRequest(f"{where}: 'namespace' must be a string", field="namespace")
    limit = table.get("recall_limit", 5)
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidRequest(f"{where}: 'recall_limit' must be an integer", field="recall_limit")
    return SlotConfig(
        name=_string(table, "name", where),
        description=_string(table, "description", where),
        provider=_string(table, "provider", where),
        options=dict(options),
        workspace=_string(table, "workspace", where),
        scope=scope,  # type: ignore[arg-type]
        value=value,
        namespace=namespace,
        visibility=_choice(table, "visibility", where, ("scope", "session"), "scope"),  # type: ignore[arg-type]
        kind=_choice(table, "kind", where, ("memory", "notes"), "memory"),  # type: ignore[arg-type]
        recall_limit=limit,
    )


def _http(table: object, where: str) -> HttpLimits:
    if not isinstance(table, Mapping):
        raise InvalidRequest(f"{where}: 'http' must be a table ([http] with body_timeout = ...)", field="http")
    return structure(dict(table), HttpLimits, what=f"{where} [http]")


def parse_server_config(data: Mapping[str, Any], *, source: str = "") -> ServerConfig:
    """Validate a parsed configuration table.

    :raises InvalidRequest: naming the key and how to fix it.
    """
    where = _where(source)
    unknown = sorted(str(k) for k in data if k not in _TOP_KEYS)
    if unknown:
        raise InvalidRequest(
            f"{where}: unknown key(s) {', '.join(unknown)}; the file takes {', '.join(_TOP_KEYS)}", field=unknown[0]
        )
    raw_slots = data.get("slots", [])
    if not isinstance(raw_slots, list):
        raise InvalidRequest(f"{where}: 'slots' must be an array of tables ([[slots]])", field="slots")
    slots = tuple(_slot(table, index, source) for index, table in enumerate(raw_slots))
    if not slots:
        slots = (SlotConfig(name=DEFAULT_SLOT, description="Long-term memory."),)
    names = [s.name for s in slots]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidRequest(f"{where}: slot names must be unique; {', '.join(dupes)} appear twice", field="name")
    principal = _string(data, "principal", where, default=DEFAULT_PRINCIPAL)
    if not principal.strip():
        raise InvalidRequest(f"{where}: 'principal' is blank: name the local user, or leave it out", field="principal")
    return ServerConfig(
        slots=slots,
        workspace=_string(data, "workspace", where, default="default"),
        principal=principal,
        tokens_file=_string(data, "tokens_file", where),
        source=source,
        http=_http(data.get("http", {}), where),
    )


def load_server_config(path: str | Path) -> ServerConfig:
    """Read and validate an MCP configuration file.

    :raises InvalidRequest: a missing, unreadable or invalid file, naming it.
    """
    location = Path(path)
    try:
        data = tomllib.loads(location.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidRequest(
            f"mcp config {str(location)!r} does not exist: create it (see docs/agent-builders/mcp.md) "
            "or pass --slot NAME instead",
            field="slots",
        ) from None
    except OSError as exc:
        raise InvalidRequest(f"mcp config {str(location)!r} cannot be read: {exc}", field="slots") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidRequest(f"mcp config {str(location)!r} is not valid TOML: {exc}", field="slots") from None
    return parse_server_config(data, source=str(location))
