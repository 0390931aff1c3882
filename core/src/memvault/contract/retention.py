"""Layer 1: memory over time: retention policies, durations, and the sweep's request and result (P41-P45).

A **retention policy** says how long each tier keeps a document after its last
accepted write (``daily = "90d"``), with overrides per workspace. The vault sets
``RetainRequest.retention`` on each write from it, so a provider computes the
document's effective expiry (``purge_at``) at the write; a sweep
(``memvault_sweep_expired``) also removes documents whose last write is older
than the policy's current cutoffs, so a shortened policy applies to documents
written before it at the next sweep.

Durations are written ``<integer><unit>`` with the unit one of ``s`` (seconds),
``m`` (minutes), ``h`` (hours), ``d`` (days), ``w`` (weeks) or ``y`` (365 days),
or ``"off"`` for none (:func:`parse_duration`).

May import: :mod:`memvault.contract.errors` and :mod:`memvault.contract.models`.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from attrs import field, frozen

from memvault.contract.errors import InvalidRequest
from memvault.contract.models import DocumentInfo, Tier, validate_identifier

__all__ = [
    "DEFAULT_IDEMPOTENCY_WINDOW",
    "DEFAULT_SWEEP_INTERVAL",
    "MAX_SWEEP_LIMIT",
    "Cutoff",
    "RetentionPolicy",
    "SweepRequest",
    "SweepResult",
    "format_duration",
    "idempotency_window_from",
    "parse_duration",
    "sweep_interval_from",
]

#: How long a provider remembers an idempotency key unless ``[idempotency] window`` says otherwise (P44).
DEFAULT_IDEMPOTENCY_WINDOW: Final = _dt.timedelta(hours=24)
#: How often a vault's background sweeper runs unless ``[retention] sweep_interval`` says otherwise.
DEFAULT_SWEEP_INTERVAL: Final = _dt.timedelta(hours=1)
#: The most documents one ``memvault_sweep_expired`` call removes (a sweep is a loop of short calls).
MAX_SWEEP_LIMIT: Final = 10_000

_DURATION = re.compile(r"\s*(\d{1,9})\s*([smhdwy])\s*", re.ASCII)
_UNITS: Final = {
    "s": _dt.timedelta(seconds=1),
    "m": _dt.timedelta(minutes=1),
    "h": _dt.timedelta(hours=1),
    "d": _dt.timedelta(days=1),
    "w": _dt.timedelta(weeks=1),
    "y": _dt.timedelta(days=365),
}
_DURATION_RULE: Final = (
    'a whole number and a unit, one of s, m, h, d, w, y (365 days): "90d", "12h", "1y"; or "off" for none'
)


def parse_duration(value: object, field_name: str = "duration") -> _dt.timedelta | None:
    """A duration (``"90d"``, ``"1y"``) as a :class:`~datetime.timedelta`; ``"off"`` as ``None``.

    :param field_name: how the value is named in the error (``"retention.daily"``).
    :raises InvalidRequest: naming ``field_name`` and the rule, for anything else (``"90"``, ``"3 months"``,
        ``"0d"``, a number).
    """
    if isinstance(value, str) and value.strip().lower() == "off":
        return None
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        shown = repr(value[:40]) if isinstance(value, str) else f"{value!r} ({type(value).__name__})"
        raise InvalidRequest(f"{field_name} {shown} is not a duration: use {_DURATION_RULE}", field=field_name)
    count, unit = int(match.group(1)), match.group(2)
    if count == 0:
        raise InvalidRequest(
            f'{field_name} {value!r} is zero: a retention must be positive; write "off" for none', field=field_name
        )
    return count * _UNITS[unit]


def format_duration(value: _dt.timedelta | None) -> str:
    """The shortest :func:`parse_duration` spelling of ``value`` (``"off"`` for ``None``)."""
    if value is None:
        return "off"
    seconds = int(value.total_seconds())
    for unit in ("y", "w", "d", "h", "m"):
        size = int(_UNITS[unit].total_seconds())
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _tier_map(value: Mapping[Any, Any]) -> Mapping[Tier, Any]:
    return MappingProxyType({Tier(tier): duration for tier, duration in value.items()})


def _workspace_map(value: Mapping[str, Mapping[Any, Any]]) -> Mapping[str, Mapping[Tier, Any]]:
    return MappingProxyType({ws: _tier_map(tiers) for ws, tiers in value.items()})


class Cutoff(NamedTuple):
    """One rule of a policy at a given time: the documents of ``tier`` whose last write is at or
    before ``before`` are past their retention.

    ``workspace_id`` ``""`` is the default rule, which applies to every workspace but
    those in ``excluded`` (they have their own rule for the tier, or none).
    """

    workspace_id: str
    tier: Tier
    before: _dt.datetime
    excluded: frozenset[str]

    def applies_to(self, workspace_id: str) -> bool:
        """Whether this rule governs documents of ``workspace_id``."""
        if self.workspace_id:
            return workspace_id == self.workspace_id
        return workspace_id not in self.excluded


@frozen(kw_only=True)
class RetentionPolicy:
    """How long each tier keeps a document after its last accepted write (P43).

    ``tiers`` is the default per tier (a tier absent keeps its documents for ever);
    ``workspaces`` overrides it per workspace and tier, ``None`` lifting the default
    for that workspace. Build one from ``memvault.toml``'s ``[retention]`` table with
    :meth:`from_config`.
    """

    tiers: Mapping[Tier, _dt.timedelta] = field(factory=dict, converter=_tier_map)
    workspaces: Mapping[str, Mapping[Tier, _dt.timedelta | None]] = field(factory=dict, converter=_workspace_map)

    def __attrs_post_init__(self) -> None:
        for tier, duration in self.tiers.items():
            _check_duration(duration, f"retention.{tier.value}", allow_none=False)
        for workspace, tiers in self.workspaces.items():
            validate_identifier(workspace, "retention.workspaces")
            for tier, override in tiers.items():
                _check_duration(override, f"retention.workspaces.{workspace}.{tier.value}", allow_none=True)

    @classmethod
    def from_config(cls, table: Mapping[str, Any], *, where: str = "retention") -> RetentionPolicy:
        """A policy from ``[retention]``'s tier keys and ``[retention.workspaces.<id>]`` tables.

        Keys other than tiers and ``workspaces`` (``sweep_interval``) are ignored here.

        :raises InvalidRequest: naming the key, for a bad duration, tier or workspace.
        """
        tiers: dict[Tier, _dt.timedelta] = {}
        workspaces: dict[str, dict[Tier, _dt.timedelta | None]] = {}
        for key, value in table.items():
            if key in ("sweep_interval", "workspaces"):
                continue
            tier = _config_tier(key, where)
            duration = parse_duration(value, f"{where}.{key}")
            if duration is not None:
                tiers[tier] = duration
        overrides = table.get("workspaces", {})
        if not isinstance(overrides, Mapping):
            raise InvalidRequest(
                f"{where}.workspaces must be a table of [{where}.workspaces.<workspace_id>] tables",
                field=f"{where}.workspaces",
            )
        for workspace, entries in overrides.items():
            name = f"{where}.workspaces.{workspace}"
            validate_identifier(workspace, name)
            if not isinstance(entries, Mapping):
                raise InvalidRequest(f"{name} must be a table of tier = duration", field=name)
            workspaces[workspace] = {
                _config_tier(key, name): parse_duration(value, f"{name}.{key}") for key, value in entries.items()
            }
        return cls(tiers=tiers, workspaces=workspaces)

    def __bool__(self) -> bool:
        """Whether the policy retains anything less than for ever."""
        return bool(self.tiers) or any(d is not None for t in self.workspaces.values() for d in t.values())

    def for_(self, workspace_id: str, tier: Tier | str) -> _dt.timedelta | None:
        """The retention of ``tier`` in ``workspace_id`` (the override, else the default; ``None``: for ever)."""
        tier = Tier(tier)
        override = self.workspaces.get(workspace_id)
        if override is not None and tier in override:
            return override[tier]
        return self.tiers.get(tier)

    def cutoffs(self, now: _dt.datetime) -> list[Cutoff]:
        """The policy's rules at ``now``: per (workspace or ``""``, tier), the last write time at or before
        which a document is past its retention, defaults first."""
        out = [
            Cutoff(
                "",
                tier,
                now - duration,
                frozenset(ws for ws, tiers in self.workspaces.items() if tier in tiers),
            )
            for tier, duration in sorted(self.tiers.items(), key=lambda item: item[0].value)
        ]
        for workspace, tiers in sorted(self.workspaces.items()):
            for tier, override in sorted(tiers.items(), key=lambda item: item[0].value):
                if override is not None:
                    out.append(Cutoff(workspace, tier, now - override, frozenset()))
        return out

    def past_retention(self, workspace_id: str, tier: Tier | str, last_write: _dt.datetime, now: _dt.datetime) -> bool:
        """Whether a document last written at ``last_write`` is past its retention at ``now``."""
        duration = self.for_(workspace_id, tier)
        return duration is not None and last_write <= now - duration

    def describe(self) -> list[tuple[str, str, str]]:
        """``(workspace or "(default)", tier, duration)`` rows for ``memvault retention show``."""
        rows = [("(default)", tier.value, format_duration(d)) for tier, d in self.tiers.items()]
        for workspace, tiers in sorted(self.workspaces.items()):
            rows += [(workspace, tier.value, format_duration(d)) for tier, d in tiers.items()]
        return rows


def sweep_interval_from(table: Mapping[str, Any], *, where: str = "retention") -> _dt.timedelta | None:
    """``[retention] sweep_interval`` (default 1 h; ``"off"``: no background sweep).

    :raises InvalidRequest: naming ``retention.sweep_interval`` for a bad duration.
    """
    if "sweep_interval" not in table:
        return DEFAULT_SWEEP_INTERVAL
    return parse_duration(table["sweep_interval"], f"{where}.sweep_interval")


def idempotency_window_from(table: Mapping[str, Any], *, where: str = "idempotency") -> _dt.timedelta:
    """``[idempotency] window`` (default 24 h), how long a provider remembers a key (P45).

    :raises InvalidRequest: naming the key, for a bad or ``"off"`` window or an unknown key.
    """
    unknown = sorted(set(table) - {"window"})
    if unknown:
        raise InvalidRequest(
            f"unknown key(s) {', '.join(unknown)} in [{where}]: the table takes only window",
            field=f"{where}.{unknown[0]}",
        )
    if "window" not in table:
        return DEFAULT_IDEMPOTENCY_WINDOW
    window = parse_duration(table["window"], f"{where}.window")
    if window is None:
        raise InvalidRequest(
            f'{where}.window cannot be "off": keys must be forgotten some time; give a duration such as "24h"',
            field=f"{where}.window",
        )
    return window


def _config_tier(key: str, where: str) -> Tier:
    try:
        tier = Tier(key)
    except ValueError:
        allowed = ", ".join(t.value for t in Tier)
        raise InvalidRequest(
            f"{where}.{key} is not a tier: use one of {allowed} (or sweep_interval, or a "
            f"[{where}.workspaces.<id>] table)",
            field=f"{where}.{key}",
        ) from None
    return tier


def _check_duration(value: object, name: str, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, _dt.timedelta) or value <= _dt.timedelta(0):
        raise InvalidRequest(f"{name} must be a positive duration, got {value!r}", field=name)


def _aware(instance: object, attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, _dt.datetime) or value.utcoffset() is None):
        raise InvalidRequest(f"{attribute.name} must be a timezone-aware datetime", field=attribute.name)


def _limit(instance: object, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SWEEP_LIMIT:
        raise InvalidRequest(f"limit must be an integer in 1..{MAX_SWEEP_LIMIT}, got {value!r}", field="limit")


@frozen(kw_only=True)
class SweepRequest:
    """What one ``memvault_sweep_expired`` call removes, or with ``dry_run`` only reports (P43).

    Documents whose effective expiry (``purge_at``) is at or before ``now``;
    documents whose last accepted write is at or before their (workspace, tier)
    cutoff of ``retention`` at ``now``; quarantine copies expired at ``now``; and
    idempotency keys recorded before ``keys_before`` (``None``: keep every key).
    At most ``limit`` documents per call.
    """

    now: _dt.datetime = field(validator=_aware)
    retention: RetentionPolicy = field(factory=RetentionPolicy)
    keys_before: _dt.datetime | None = field(default=None, validator=_aware)
    dry_run: bool = False
    limit: int = field(default=1000, validator=_limit)


def _documents(value: Iterable[DocumentInfo]) -> list[DocumentInfo]:
    return list(value)


@frozen(kw_only=True)
class SweepResult:
    """What one sweep call removed (or would remove): the documents, how many quarantine copies and
    idempotency keys, and ``more`` when documents past their expiry remain beyond ``limit``."""

    documents: list[DocumentInfo] = field(factory=list, converter=_documents)
    quarantine_removed: int = 0
    keys_removed: int = 0
    more: bool = False
