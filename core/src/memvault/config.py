"""Layer 4 (beside the facade): ``memvault.toml``, which provider to open, its settings, and the vault's options.

.. code-block:: toml

    provider = "sqlite"          # MEMVAULT_PROVIDER overrides
    scanner = "builtin"          # or "off", or a scanner plugin's name; default: builtin
                                 # (off for remote providers: the service scans)
    health_timeout = 0.2         # seconds; default 0.2 local, 1.0 remote

    [scan]                       # the builtin scanner's policy (memvault.scanner.engine.ScanPolicy)
    allow = ["url_placeholder"]  # pattern ids that never fire
    [scan.thresholds]
    role_hijack = 1.5            # per category; default 1.0

    [embed]                      # recall by meaning (contract P36)
    embedder = "minilm"          # or "off"; default "auto": the only installed embedder
                                 # (MEMVAULT_EMBEDDER overrides)

    [providers.sqlite]
    path = "memory.db"

    [server]                     # read by `memvault serve` (memvault-http-remote)
    port = 8765

    [retention]                  # memory over time (contract P43; docs/operators/retention.md)
    daily = "90d"                # per tier: <int><s|m|h|d|w|y> or "off"; default: kept for ever
    sweep_interval = "1h"        # the background sweep; "off" disables it
    [retention.workspaces.acme]  # overrides for one workspace ("off" lifts a default)
    daily = "30d"

    [idempotency]
    window = "24h"               # how long a provider remembers an idempotency key (P45)

    [telemetry]                  # OpenTelemetry spans (memvault[otel]; docs/operators/observability.md)
    traces = "off"               # or "console", "otlp" (MEMVAULT_TRACES overrides)
    record_content = false       # memory text and queries in spans (MEMVAULT_TRACE_CONTENT overrides)

The file is found at the explicit path, else ``MEMVAULT_CONFIG``, else
``./memvault.toml`` when it exists; with none, the defaults above apply.
Unknown keys are rejected with the key named.

May import: :mod:`memvault.contract`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Final

import attrs
from attrs import field, frozen

from memvault.contract.errors import InvalidRequest
from memvault.contract.retention import RetentionPolicy, idempotency_window_from, sweep_interval_from
from memvault.contract.wire import structure

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["DEFAULT_PROVIDER", "Config", "find_config", "load_config", "read_toml"]

DEFAULT_PROVIDER: Final = "sqlite"
DEFAULT_FILE: Final = "memvault.toml"


@frozen(kw_only=True)
class Config:
    """The parsed configuration."""

    provider: str = DEFAULT_PROVIDER
    scanner: str | None = None
    health_timeout: float | None = None
    providers: dict[str, dict[str, Any]] = field(factory=dict)
    server: dict[str, Any] = field(factory=dict)
    source: str = ""
    scan: dict[str, Any] = field(factory=dict)
    #: ``[embed]``: ``embedder`` (a name, ``"auto"`` or ``"off"``) and the embedder's own settings.
    embed: dict[str, Any] = field(factory=dict)
    #: ``[telemetry]``: ``traces``, ``record_content``, ``store_id`` (:func:`memvault.telemetry.configure`).
    telemetry: dict[str, Any] = field(factory=dict)
    #: ``[retention]``: tier durations, ``sweep_interval``, ``[retention.workspaces.<id>]`` (P43).
    retention: dict[str, Any] = field(factory=dict)
    #: ``[idempotency]``: ``window`` (P45).
    idempotency: dict[str, Any] = field(factory=dict)

    def __attrs_post_init__(self) -> None:
        # Checked when the file is read, so every command reports a bad duration before it opens anything.
        RetentionPolicy.from_config(self.retention)
        sweep_interval_from(self.retention)
        idempotency_window_from(self.idempotency)


def find_config(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to read, or ``None`` for the defaults."""
    if path is not None:
        return Path(path)
    env = os.environ.get("MEMVAULT_CONFIG")
    if env:
        return Path(env)
    local = Path(DEFAULT_FILE)
    return local if local.is_file() else None


def read_toml(path: Path, *, what: str, field: str, missing_hint: str) -> dict[str, Any]:
    """Parse one TOML file; every failure is an :class:`InvalidRequest` naming the file.

    :param what: how messages name the file (``"config file"``, ``"tokens file"``).
    :param field: the ``InvalidRequest.field`` to report.
    :param missing_hint: how to fix a missing file, appended to its message.
    """
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidRequest(f"{what} {str(path)!r} does not exist: {missing_hint}", field=field) from None
    except OSError as exc:
        raise InvalidRequest(f"{what} {str(path)!r} cannot be read: {exc}", field=field) from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidRequest(f"{what} {str(path)!r} is not valid TOML: {exc}", field=field) from None
    except ValueError as exc:  # not UTF-8, or an integer Python will not convert (over 4300 digits)
        raise InvalidRequest(f"{what} {str(path)!r} cannot be read as UTF-8 TOML: {exc}"[:400], field=field) from None
    return data


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """Read and validate the configuration, then apply ``MEMVAULT_PROVIDER``.

    :raises InvalidRequest: for an unreadable file, bad TOML, or an unknown key.
    """
    found = find_config(path)
    data: dict[str, Any] = {}
    if found is not None:
        if path is not None:
            hint = "create it, or fix the path given to --config (Python: config=)"
        elif os.environ.get("MEMVAULT_CONFIG"):
            hint = "MEMVAULT_CONFIG names it: create it, or unset MEMVAULT_CONFIG"
        else:  # pragma: no cover - ./memvault.toml is only chosen when it exists
            hint = "create it"
        data = read_toml(found, what="config file", field="config", missing_hint=hint)
        data["source"] = str(found)
    config = structure(data, Config, what=str(found) if found else "config")
    override = os.environ.get("MEMVAULT_PROVIDER")
    if override:
        config = attrs.evolve(config, provider=override)
    return config
