"""Boundary validation in the request types: contract P1-P10, P14-P16, P22-P23."""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import pytest

import memvault
from memvault.contract.errors import InvalidRequest
from memvault.contract.models import CAPS, Tier, check_cap, label_for, parse_label, today_utc


def retain(**overrides: Any) -> memvault.RetainRequest:
    fields: dict[str, Any] = {
        "workspace_id": "w1",
        "agent_id": "a1",
        "tier": "AGENT",
        "content": "text",
        "mode": "append",
    }
    fields.update(overrides)
    return memvault.RetainRequest(**fields)


# -- P1 tiers ------------------------------------------------------------------


@pytest.mark.parametrize("value", ["AGENT", "CREW", "PERSONA", "pins", "daily", "peers", "lessons"])
def test_p1_every_tier_string_is_accepted(value: str) -> None:
    assert Tier(value).value == value


@pytest.mark.parametrize("value", ["agent", "PINS", "Daily", "notes", "", 3])
def test_p1_other_tier_values_are_invalid_request(value: object) -> None:
    with pytest.raises(InvalidRequest, match="is not a tier") as info:
        memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier=value)  # type: ignore[arg-type]
    assert info.value.field == "tier"


# -- P2 partition ids required ------------------------------------------------


def test_p2_workspace_id_is_required_on_every_verb() -> None:
    for build in (
        lambda: retain(workspace_id=""),
        lambda: memvault.RecallRequest(agent_id="a1", query="q"),
        lambda: memvault.ReadRequest(agent_id="a1", tier="AGENT"),
        lambda: memvault.ForgetRequest(agent_id="a1", id="AGENT.md"),
    ):
        with pytest.raises(InvalidRequest, match="workspace_id is required"):
            build()


@pytest.mark.parametrize("tier", [t for t in Tier if t.is_agent_tier and t is not Tier.LESSONS])
def test_p2_agent_tiers_require_agent_id(tier: Tier) -> None:
    with pytest.raises(InvalidRequest, match="agent_id is required") as info:
        retain(agent_id="", crew_id="c1", tier=tier, key="2026-01-02" if tier is Tier.DAILY else "bob")
    assert info.value.field == "agent_id"


def test_p2_crew_tier_requires_crew_id() -> None:
    with pytest.raises(InvalidRequest, match="crew_id is required"):
        retain(tier="CREW")


def test_p2_recall_without_any_partition_is_invalid() -> None:
    with pytest.raises(InvalidRequest, match="agent_id or crew_id"):
        memvault.RecallRequest(workspace_id="w1", query="q")


# -- P3 identifiers --------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["a/b", "a\\b", "..", "a..b", ".hidden", "a\x00b", "tab\there", "x" * 129, "spa ce", "ünï"],
)
@pytest.mark.parametrize("field", ["workspace_id", "agent_id", "data_subject_id"])
def test_p3_unsafe_identifiers_are_invalid_request(field: str, bad: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        retain(**{field: bad})
    assert info.value.field == field
    assert "A-Z a-z 0-9" in str(info.value)


@pytest.mark.parametrize("good", ["a", "user@example.com", "team:alpha-1", "x" * 128, "a.b_c"])
def test_p3_identifiers_of_the_allowed_set_pass(good: str) -> None:
    assert retain(agent_id=good).agent_id == good


# -- P4 labels -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tier", "key", "label"),
    [
        (Tier.AGENT, "", "AGENT.md"),
        (Tier.CREW, "", "CREW.md"),
        (Tier.PERSONA, "", "PERSONA.md"),
        (Tier.PINS, "", "pins.md"),
        (Tier.LESSONS, "", "lessons.md"),
        (Tier.DAILY, "2026-01-31", "daily/2026-01-31.md"),
        (Tier.PEERS, "bob", "peers/bob.md"),
    ],
)
def test_p4_labels_round_trip(tier: Tier, key: str, label: str) -> None:
    assert label_for(tier, key) == label
    assert parse_label(label) == (tier, key)


@pytest.mark.parametrize(
    "bad", ["/etc/passwd", "agent.md", "daily/tomorrow.md", "peers/../x.md", "peers/.md", "AGENT", "w1/AGENT.md"]
)
def test_p4_other_label_shapes_are_invalid(bad: str) -> None:
    with pytest.raises(InvalidRequest, match="not a document label"):
        parse_label(bad)


# -- P5 mode -----------------------------------------------------------------------


def test_p5_mode_has_no_default() -> None:
    with pytest.raises(InvalidRequest, match="mode is required") as info:
        retain(mode=None)
    assert info.value.field == "mode"


@pytest.mark.parametrize("bad", ["", "upsert", "APPEND"])
def test_p5_empty_or_unknown_mode_is_invalid(bad: str) -> None:
    with pytest.raises(InvalidRequest, match="mode"):
        retain(mode=bad)


# -- P6 content ----------------------------------------------------------------------


def test_p6_empty_content_is_invalid() -> None:
    with pytest.raises(InvalidRequest, match="content is required"):
        retain(content="")


def test_p6_content_that_is_not_utf8_encodable_is_invalid() -> None:
    with pytest.raises(InvalidRequest, match="UTF-8"):
        retain(content="half a pair \ud800")


# -- P7 keys ---------------------------------------------------------------------


def test_p7_empty_daily_key_means_today_utc() -> None:
    request = retain(tier="daily", key="")
    assert request.key == dt.datetime.now(dt.timezone.utc).date().isoformat() == today_utc()
    assert request.label == f"daily/{today_utc()}.md"


@pytest.mark.parametrize("bad", ["2026-13-01", "2026-02-30", "20260101", "yesterday", "2026-01-01/x", "../2026-01-01"])
def test_p7_daily_key_must_be_an_iso_date(bad: str) -> None:
    with pytest.raises(InvalidRequest, match="date"):
        retain(tier="daily", key=bad)


def test_p7_peers_requires_a_key() -> None:
    with pytest.raises(InvalidRequest, match="key is required for the peers tier"):
        retain(tier="peers", key="")


@pytest.mark.parametrize("bad", ["a/b", "a\\b", "..", "x\x00", ".dot"])
def test_p7_peer_keys_follow_the_identifier_rule(bad: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        retain(tier="peers", key=bad)
    assert info.value.field == "key"


def test_p7_other_tiers_ignore_the_key() -> None:
    assert retain(tier="pins", key="../../anything").key == ""


# -- P8 lessons ---------------------------------------------------------------------


def test_p8_lessons_is_read_only_through_retain() -> None:
    with pytest.raises(InvalidRequest, match="read-only"):
        retain(tier="lessons")
    assert memvault.ReadRequest(workspace_id="w1", agent_id="a1", tier="lessons").label == "lessons.md"


# -- P9 caps -------------------------------------------------------------------------


def test_p9_caps_are_the_contract_values() -> None:
    assert {t.value: c for t, c in CAPS.items()} == {
        "AGENT": 4000,
        "CREW": 4000,
        "PERSONA": 1500,
        "pins": 8000,
        "daily": 30000,
        "peers": 1500,
        "lessons": None,
    }


def test_p9_over_the_cap_raises_with_the_numbers() -> None:
    with pytest.raises(memvault.CapExceeded) as info:
        check_cap(Tier.PERSONA, current=1000, projected=1501)
    assert (info.value.tier, info.value.cap, info.value.projected, info.value.current) == ("PERSONA", 1500, 1501, 1000)


def test_p9_warning_starts_at_80_percent() -> None:
    assert check_cap(Tier.AGENT, current=0, projected=3199) == ""
    assert check_cap(Tier.AGENT, current=0, projected=3200) == "AGENT document uses 3200 of 4000 bytes, 80%"
    assert check_cap(Tier.AGENT, current=0, projected=4000).endswith("4000 of 4000 bytes, 100%")


# -- P14-P16 recall -------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", " ", "\t\n"])
def test_p14_blank_query_is_invalid(bad: str) -> None:
    with pytest.raises(InvalidRequest, match="non-space"):
        memvault.RecallRequest(workspace_id="w1", agent_id="a1", query=bad)


@pytest.mark.parametrize(("given", "effective"), [(0, 20), (-5, 20), (21, 20), (1000, 20), (1, 1), (20, 20), (7, 7)])
def test_p15_limit_is_clamped(given: int, effective: int) -> None:
    assert memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="q", limit=given).limit == effective


def test_p15_limit_must_be_an_integer() -> None:
    with pytest.raises(InvalidRequest, match="limit"):
        memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="q", limit="5")  # type: ignore[arg-type]


def test_p16_empty_tier_reads_agent_tiers_and_crew() -> None:
    request = memvault.RecallRequest(workspace_id="w1", agent_id="a1", crew_id="c1", query="q")
    scopes = {(p.kind, p.owner_id): tiers for p, tiers in request.scopes()}
    assert scopes[("agent", "a1")] == tuple(t for t in Tier if t is not Tier.CREW)
    assert scopes[("crew", "c1")] == (Tier.CREW,)


def test_p16_agent_only_recall_never_reads_crew() -> None:
    request = memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="q")
    assert all(p.kind == "agent" for p, _ in request.scopes())


# -- P22-P23 forget -----------------------------------------------------------------


def test_p22_forget_needs_exactly_one_target() -> None:
    for fields in ({}, {"id": "AGENT.md", "data_subject_id": "s1"}):
        with pytest.raises(InvalidRequest, match="must set exactly one of id or data_subject_id"):
            memvault.ForgetRequest(workspace_id="w1", agent_id="a1", **fields)


def test_p23_forget_id_must_be_a_label() -> None:
    with pytest.raises(InvalidRequest, match="not a document label"):
        memvault.ForgetRequest(workspace_id="w1", agent_id="a1", id="/tmp/AGENT.md")


def test_p23_forget_crew_label_needs_crew_id() -> None:
    with pytest.raises(InvalidRequest, match="crew_id is required"):
        memvault.ForgetRequest(workspace_id="w1", agent_id="a1", id="CREW.md")


# -- results ------------------------------------------------------------------------


def test_p18_snippet_results_validate_their_shape() -> None:
    with pytest.raises(ValueError, match="score"):
        memvault.RecallSnippet(source="AGENT.md", line=1, snippet="x", score=1.5)
    with pytest.raises(ValueError, match="line"):
        memvault.RecallSnippet(source="AGENT.md", line=0, snippet="x", score=0.5)
    with pytest.raises(ValueError, match="500"):
        memvault.RecallSnippet(source="AGENT.md", line=1, snippet="x" * 501, score=0.5)


def test_p25_health_status_is_timezone_aware() -> None:
    assert memvault.HealthStatus(ok=True).checked_at.tzinfo is not None
    with pytest.raises(ValueError, match="timezone-aware"):
        memvault.HealthStatus(ok=True, checked_at=dt.datetime(2026, 1, 1))


def test_evolve_revalidates() -> None:
    with pytest.raises(InvalidRequest):
        attrs.evolve(retain(), agent_id="../x")


# -- P14: the size of a query is bounded ---------------------------------------------


def test_query_over_the_byte_bound_is_invalid_request_naming_the_limit() -> None:
    from memvault.contract.models import MAX_QUERY_BYTES

    with pytest.raises(InvalidRequest, match=f"{MAX_QUERY_BYTES} UTF-8 bytes") as info:
        memvault.RecallRequest(workspace_id="w", agent_id="a", query="é" * (MAX_QUERY_BYTES // 2 + 1))
    assert info.value.field == "query"
    memvault.RecallRequest(workspace_id="w", agent_id="a", query="x" * MAX_QUERY_BYTES)  # at the bound: accepted


def test_query_with_too_many_distinct_terms_is_invalid_request_naming_the_limit() -> None:
    from memvault.contract.models import MAX_QUERY_TERMS

    many = " ".join(f"term{i}" for i in range(MAX_QUERY_TERMS + 1))
    with pytest.raises(InvalidRequest, match=f"{MAX_QUERY_TERMS} distinct search terms") as info:
        memvault.RecallRequest(workspace_id="w", agent_id="a", query=many)
    assert info.value.field == "query"
    at_bound = " ".join(f"term{i}" for i in range(MAX_QUERY_TERMS))
    memvault.RecallRequest(workspace_id="w", agent_id="a", query=at_bound + " " + at_bound)  # repeats are not distinct


def test_a_long_natural_language_question_fits_the_query_bounds() -> None:
    question = (
        "Earlier this month the user told me about a trip they were planning with their sister to the coast "
        "of Portugal, including which small towns they wanted to visit, the dates they had in mind, the budget "
        "they agreed on, the dietary restrictions of the sister, whether they would rent a car or take trains, "
        "and which museum they absolutely did not want to miss; what exactly did they say about each of these, "
        "and did they mention any concerns about the weather, the language, or their passports expiring soon? "
    ) * 3
    memvault.RecallRequest(workspace_id="w", agent_id="a", query=question)


def test_query_with_a_lone_surrogate_is_invalid_request() -> None:
    with pytest.raises(InvalidRequest) as info:
        memvault.RecallRequest(workspace_id="w", agent_id="a", query="tea \ud800")
    assert info.value.field == "query"
