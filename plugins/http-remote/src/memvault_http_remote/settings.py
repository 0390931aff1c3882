"""The service's settings: the ``[server]`` table of ``memvault.toml`` and the tokens file.

.. code-block:: toml

    [server]
    host = "127.0.0.1"
    port = 8765
    tokens_file = "tokens.toml"       # optional; entries add to the inline ones
    max_body_bytes = 1048576          # 413 above this, checked while the body streams
    body_timeout = 5.0                # seconds for a request's head, then its whole body, to arrive; 408 past it
    request_timeout = 30.0            # seconds the provider may take per request; 504 past it
    max_concurrent = 64               # requests in flight in total; 503 past it
    max_per_token = 16                # requests in flight per token (per peer without tokens); 503 past it
    max_unauthenticated = 8           # requests in flight without a valid token; 503 past it
    max_batch_items = 64              # retains per POST /v1/retain/batch, at most max_per_token (each item counts
                                      # as a request in flight); 400 past the smaller of the two
    health_interval = 1.0             # seconds one health probe answers every /v1/health
    health_timeout = 5.0              # a probe running longer than this reports ok: false
    health_rate = 50.0                # health answers per second at most (callers wait their turn, <= 0.25 s)
    shutdown_grace = 30.0             # seconds SIGTERM waits for in-flight requests
    metrics_public = false            # true: GET /metrics answers without a token (bind to a private address)

    [[server.tokens]]
    name = "agents"
    sha256 = "9f86d081884c7d65..."    # `memvault token new` prints this entry
    workspaces = ["acme", "team-*"]   # exact ids, prefix patterns ending in '*', or "*"

Unknown keys are rejected with the key named (the core's cattrs converter).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from attrs import field, frozen

from memvault.config import read_toml
from memvault.contract.errors import InvalidRequest
from memvault.contract.wire import structure

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "ServerSettings", "TokenEntry", "TokenStore", "hash_token"]

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
_HEX64 = re.compile(r"[0-9a-f]{64}")
_PATTERN = re.compile(r"\*|[A-Za-z0-9._:@-]{1,128}\*?")


def hash_token(token: str) -> str:
    """The hex sha256 the service stores instead of the token itself."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _sha256_hex(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise InvalidRequest(
            "token sha256 must be 64 lowercase hex characters: generate the entry with `memvault token new`",
            field="sha256",
        )


def _patterns(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, list) or not value:
        raise InvalidRequest(
            'token workspaces must list at least one workspace id or pattern (e.g. ["acme", "team-*"] or ["*"])',
            field="workspaces",
        )
    for item in value:
        if not (isinstance(item, str) and _PATTERN.fullmatch(item)):
            raise InvalidRequest(
                f"token workspace pattern {item!r} is not valid: use an exact workspace id, a prefix "
                "ending in '*' (team-*), or '*' for every workspace",
                field="workspaces",
            )


@frozen(kw_only=True)
class TokenEntry:
    """One bearer token, stored hashed, and the workspaces it may touch."""

    name: str = ""
    sha256: str = field(validator=_sha256_hex)
    workspaces: list[str] = field(validator=_patterns)

    def allows(self, workspace_id: str) -> bool:
        """Whether this token may touch ``workspace_id`` (exact, ``prefix*`` or ``*``)."""
        for pattern in self.workspaces:
            if pattern.endswith("*"):
                if workspace_id.startswith(pattern[:-1]):
                    return True
            elif pattern == workspace_id:
                return True
        return False


@frozen(kw_only=True)
class _TokensFile:
    tokens: list[TokenEntry] = field(factory=list)


def _positive(instance: object, attribute: Any, value: Any) -> None:
    # `not 0 < value < inf`: nan (which TOML allows) fails it too, as does inf (a timeout that never ends).
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise InvalidRequest(
            f"server.{attribute.name} must be a positive, finite number, got {value!r}", field=attribute.name
        )


def _flag(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidRequest(f"server.{attribute.name} must be true or false, got {value!r}", field=attribute.name)


def _port(instance: object, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise InvalidRequest(f"server.port must be an integer in 0..65535, got {value!r}", field="port")


@frozen(kw_only=True)
class ServerSettings:
    """Everything ``memvault serve`` needs besides the provider."""

    host: str = DEFAULT_HOST
    port: int = field(default=DEFAULT_PORT, validator=_port)
    tokens_file: str = ""
    tokens: list[TokenEntry] = field(factory=list)
    max_body_bytes: int = field(default=1024 * 1024, validator=_positive)
    body_timeout: float = field(default=5.0, validator=_positive)
    request_timeout: float = field(default=30.0, validator=_positive)
    max_concurrent: int = field(default=64, validator=_positive)
    max_per_token: int = field(default=16, validator=_positive)
    max_unauthenticated: int = field(default=8, validator=_positive)
    max_batch_items: int = field(default=64, validator=_positive)
    health_interval: float = field(default=1.0, validator=_positive)
    health_timeout: float = field(default=5.0, validator=_positive)
    health_rate: float = field(default=50.0, validator=_positive)
    shutdown_grace: float = field(default=30.0, validator=_positive)
    #: ``GET /metrics`` without a token (default: any valid token is needed).
    metrics_public: bool = field(default=False, validator=_flag)

    @property
    def batch_items_limit(self) -> int:
        """The most retains one ``POST /v1/retain/batch`` can carry with these settings.

        ``max_batch_items``, and no more than one caller may have in flight (each item
        counts as a request: ``max_per_token``, and the total ``max_concurrent``). The
        OpenAPI document publishes this number; a larger batch is a 400 saying so.
        """
        return min(self.max_batch_items, self.max_per_token, self.max_concurrent)

    @classmethod
    def from_table(cls, table: dict[str, Any], *, source: str = "memvault.toml") -> ServerSettings:
        """Validate the ``[server]`` table; unknown keys are rejected with the key named.

        :raises InvalidRequest: naming the offending key.
        """
        return structure(table, cls, what=f"{source} [server]")


def load_tokens_file(path: str | Path) -> list[TokenEntry]:
    """Read a tokens file: TOML with ``[[tokens]]`` entries (``name``, ``sha256``, ``workspaces``).

    :raises InvalidRequest: for a missing, unreadable or malformed file.
    """
    location = Path(path)
    data = read_toml(
        location,
        what="tokens file",
        field="tokens_file",
        # `memvault token new`'s own hint (memvault_http_remote.commands.TOKEN_NEW_HINT), runnable as printed.
        missing_hint=f"create it with `memvault token new --name NAME --workspace WORKSPACE >> {location}`",
    )
    return structure(data, _TokensFile, what=str(location)).tokens


class TokenStore:
    """Looks a presented bearer token up among the hashed entries, in constant time."""

    def __init__(self, entries: Iterable[TokenEntry]) -> None:
        self.entries = list(entries)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def lookup(self, token: str) -> TokenEntry | None:
        """The entry whose hash matches ``token``, or ``None``.

        Every entry is compared with :func:`hmac.compare_digest`, with no early
        exit, so the time taken says nothing about which hashes exist.
        """
        presented = hash_token(token)
        found: TokenEntry | None = None
        for entry in self.entries:
            if hmac.compare_digest(presented, entry.sha256) and found is None:
                found = entry
        return found
