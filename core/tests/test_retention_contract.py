"""The contract pieces of memory over time (P41-P45): durations, policies, the clock, the fingerprint,
and what crosses the wire."""

from __future__ import annotations

import datetime as dt
import inspect
import threading

import pytest

from memvault.contract import clock
from memvault.contract.errors import IdempotencyConflict, InvalidRequest
from memvault.contract.models import Capability, DocumentInfo, HealthStatus, RetainRequest, Tier
from memvault.contract.retention import RetentionPolicy, SweepRequest, format_duration, parse_duration
from memvault.contract.wire import structure, unstructure
from memvault.hooks import provider as provider_specs

UTC = dt.timezone.utc
LATER = dt.datetime(2030, 1, 1, tzinfo=UTC)


def _req(**kw: object) -> RetainRequest:
    fields: dict[str, object] = {"workspace_id": "w", "agent_id": "a", "tier": "pins", "content": "x\n"}
    fields["mode"] = "append"
    fields.update(kw)
    return RetainRequest(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90d", dt.timedelta(days=90)),
        ("1y", dt.timedelta(days=365)),
        ("12h", dt.timedelta(hours=12)),
        ("2w", dt.timedelta(weeks=2)),
        ("30m", dt.timedelta(minutes=30)),
        ("5s", dt.timedelta(seconds=5)),
        ("off", None),
        ("OFF", None),
    ],
)
def test_durations_parse(text: str, expected: dt.timedelta | None) -> None:
    assert parse_duration(text) == expected
    if expected is not None:
        assert parse_duration(format_duration(expected)) == expected


@pytest.mark.parametrize("bad", ["90", "3 months", "0d", "-1d", "1.5d", 90, "", None, "d"])
def test_bad_durations_say_how_to_write_one(bad: object) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_duration(bad, "retention.daily")
    assert caught.value.field == "retention.daily"
    assert "retention.daily" in str(caught.value)
    assert '"off"' in str(caught.value) or "90d" in str(caught.value)


def test_policy_from_config_overrides_per_workspace() -> None:
    policy = RetentionPolicy.from_config(
        {
            "daily": "90d",
            "peers": "1y",
            "sweep_interval": "1h",
            "workspaces": {"acme": {"daily": "30d", "peers": "off"}},
        }
    )
    assert policy.for_("other", Tier.DAILY) == dt.timedelta(days=90)
    assert policy.for_("acme", Tier.DAILY) == dt.timedelta(days=30)
    assert policy.for_("acme", Tier.PEERS) is None
    assert policy.for_("acme", Tier.PINS) is None
    now = dt.datetime(2026, 6, 1, tzinfo=UTC)
    cutoffs = {(c.workspace_id, c.tier): c for c in policy.cutoffs(now)}
    assert set(cutoffs) == {("", Tier.DAILY), ("", Tier.PEERS), ("acme", Tier.DAILY)}
    assert cutoffs["", Tier.DAILY].before == now - dt.timedelta(days=90)
    assert cutoffs["", Tier.DAILY].excluded == {"acme"}
    assert not cutoffs["", Tier.PEERS].applies_to("acme")
    assert cutoffs["", Tier.PEERS].applies_to("other")
    assert policy
    assert not RetentionPolicy()


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"dialy": "90d"}, "retention.dialy"),
        ({"daily": "ninety days"}, "retention.daily"),
        ({"workspaces": {"acme": {"daily": "0d"}}}, "retention.workspaces.acme.daily"),
        ({"workspaces": {"../x": {"daily": "1d"}}}, "retention.workspaces.../x"),
    ],
)
def test_bad_policies_name_their_key(table: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        RetentionPolicy.from_config(table)
    assert caught.value.field == field


def test_expires_at_must_be_aware() -> None:
    with pytest.raises(InvalidRequest) as caught:
        _req(expires_at=dt.datetime(2030, 1, 1))
    assert caught.value.field == "expires_at"
    assert "timezone-aware" in str(caught.value)
    with pytest.raises(InvalidRequest):
        _req(expires_at="2030-01-01T00:00:00+00:00")


def test_idempotency_key_follows_the_identifier_rule() -> None:
    assert _req(idempotency_key="op-1:2").idempotency_key == "op-1:2"
    for bad in ("a/b", "x" * 129, ".hidden"):
        with pytest.raises(InvalidRequest) as caught:
            _req(idempotency_key=bad)
        assert caught.value.field == "idempotency_key"


def test_fingerprint_covers_what_the_write_does_and_not_its_key_or_retention() -> None:
    base = _req(expires_at=LATER)
    same = _req(expires_at=LATER.astimezone(dt.timezone(dt.timedelta(hours=2))), idempotency_key="k")
    assert base.fingerprint() == same.fingerprint()
    assert base.fingerprint() == _req(expires_at=LATER, retention=dt.timedelta(days=1)).fingerprint()
    others = [
        _req(),
        _req(expires_at=LATER + dt.timedelta(seconds=1)),
        _req(expires_at=LATER, content="y\n"),
        _req(expires_at=LATER, mode="replace"),
        _req(expires_at=LATER, data_subject_id="s"),
        _req(expires_at=LATER, agent_id="b"),
        _req(expires_at=LATER, workspace_id="v"),
        _req(expires_at=LATER, tier="AGENT"),
        _req(expires_at=LATER, tier="peers", key="bob"),
    ]
    prints = {r.fingerprint() for r in others}
    assert len(prints) == len(others)
    assert base.fingerprint() not in prints


def test_retention_never_crosses_the_wire_and_new_fields_are_left_out_unset() -> None:
    plain = _req(retention=dt.timedelta(days=3))
    data = unstructure(plain)
    assert "retention" not in data
    assert "expires_at" not in data
    assert "idempotency_key" not in data
    with pytest.raises(InvalidRequest) as caught:
        structure({**data, "retention": "3d"}, RetainRequest)
    assert "retention" in str(caught.value)
    full = _req(expires_at=LATER, idempotency_key="k1")
    data = unstructure(full)
    assert data["expires_at"] == "2030-01-01T00:00:00+00:00"
    assert data["idempotency_key"] == "k1"
    assert structure(data, RetainRequest) == full
    with pytest.raises(InvalidRequest):
        structure({**data, "expires_at": "2030-01-01T00:00:00"}, RetainRequest)


def test_new_optional_fields_are_left_out_of_the_wire_at_their_default() -> None:
    assert "retention_overdue" not in unstructure(HealthStatus(ok=True))
    assert unstructure(HealthStatus(ok=True, retention_overdue=3))["retention_overdue"] == 3
    doc = DocumentInfo(workspace_id="w", agent_id="a", tier="pins", label="pins.md", bytes=1, digest="0" * 64)
    assert "expires_at" not in unstructure(doc)
    dated = DocumentInfo(
        workspace_id="w", agent_id="a", tier="pins", label="pins.md", bytes=1, digest="0" * 64, expires_at=LATER
    )
    assert structure(unstructure(dated), DocumentInfo) == dated


def test_use_clock_moves_time_for_every_thread_and_nests() -> None:
    manual = clock.ManualClock(LATER)
    seen: list[dt.datetime] = []
    with clock.use_clock(manual):
        assert clock.now() == LATER
        manual.advance(dt.timedelta(hours=1))
        worker = threading.Thread(target=lambda: seen.append(clock.now()))
        worker.start()
        worker.join()
        with clock.use_clock(clock.ManualClock(LATER + dt.timedelta(days=9))):
            assert clock.now() == LATER + dt.timedelta(days=9)
        assert clock.now() == LATER + dt.timedelta(hours=1)
    assert seen == [LATER + dt.timedelta(hours=1)]
    assert abs(clock.now() - dt.datetime.now(UTC)) < dt.timedelta(seconds=5)
    with pytest.raises(ValueError), clock.use_clock(lambda: dt.datetime(2030, 1, 1)):
        clock.now()


def test_sweep_request_checks_its_fields() -> None:
    with pytest.raises(InvalidRequest):
        SweepRequest(now=dt.datetime(2030, 1, 1))
    with pytest.raises(InvalidRequest):
        SweepRequest(now=LATER, limit=0)
    assert SweepRequest(now=LATER).retention == RetentionPolicy()


def test_the_capabilities_and_the_sweep_hook_exist() -> None:
    assert {Capability.EXPIRY, Capability.IDEMPOTENT_WRITES} <= Capability.ALL
    spec = provider_specs.memvault_sweep_expired
    assert list(inspect.signature(spec).parameters) == ["request"]
    error = IdempotencyConflict(key="k1", workspace_id="w")
    assert "k1" in str(error)
    assert "new key" in str(error)
