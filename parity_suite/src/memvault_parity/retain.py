"""retain: tiers and keys (P1, P4, P7, P8, P10), modes (P5, P6), caps and warnings (P9)."""

from __future__ import annotations

import datetime as dt

import pytest

import memvault
from memvault_parity.base import LABEL_SHAPE, SuiteBase

__all__ = ["CapTests", "ModeTests", "TierTests"]

_WRITABLE = ["AGENT", "CREW", "PERSONA", "pins", "daily", "peers"]
_KEYS = {"daily": "2026-02-14", "peers": "carol"}
_LABELS = {
    "AGENT": "AGENT.md",
    "CREW": "CREW.md",
    "PERSONA": "PERSONA.md",
    "pins": "pins.md",
    "daily": "daily/2026-02-14.md",
    "peers": "peers/carol.md",
}
_CAPS = {"AGENT": 4000, "CREW": 4000, "PERSONA": 1500, "pins": 8000, "daily": 30000, "peers": 1500}


class TierTests(SuiteBase):
    """The closed tier set, its labels and keys."""

    @pytest.mark.parametrize("tier", _WRITABLE)
    def test_every_writable_tier_stores_and_reads_back(self, vault: memvault.Vault, ws: str, tier: str) -> None:
        """P1/P21: each tier but lessons accepts a retain; read returns exactly the body."""
        self.put(vault, ws, f"body of {tier}\n", tier=tier, key=_KEYS.get(tier, ""))
        assert self.body(vault, ws, tier=tier, key=_KEYS.get(tier, "")) == f"body of {tier}\n"

    @pytest.mark.parametrize("tier", ["agent", "Pins", "LESSON", "notes", "", "daily/"])
    def test_unknown_tier_is_invalid_request(self, tier: str) -> None:
        """P1: the tier set is closed and case-sensitive."""
        with pytest.raises(memvault.InvalidRequest):
            memvault.RetainRequest(workspace_id="w", agent_id="a", tier=tier, content="x", mode="append")

    @pytest.mark.parametrize("tier", _WRITABLE)
    def test_retain_id_is_the_tier_label(self, vault: memvault.Vault, ws: str, tier: str) -> None:
        """P4/P10: the returned id is the tier-relative label and matches a P4 shape."""
        result = self.put(vault, ws, "labelled\n", tier=tier, key=_KEYS.get(tier, ""))
        assert result.id == _LABELS[tier]
        assert LABEL_SHAPE.fullmatch(result.id)

    def test_retain_bytes_is_the_stored_utf8_size(self, vault: memvault.Vault, ws: str) -> None:
        """P10: bytes counts UTF-8 bytes of the whole stored body, not characters."""
        first = self.put(vault, ws, "héllo ")
        second = self.put(vault, ws, "wörld ☃")
        assert first.bytes == len("héllo ".encode())
        assert second.bytes == len("héllo wörld ☃".encode())

    def test_daily_without_key_is_todays_utc_date(self, vault: memvault.Vault, ws: str) -> None:
        """P7: an empty daily key names today's real UTC date."""
        before = dt.datetime.now(dt.timezone.utc).date().isoformat()
        result = self.put(vault, ws, "today entry\n", tier="daily")
        after = dt.datetime.now(dt.timezone.utc).date().isoformat()
        assert result.id in {f"daily/{before}.md", f"daily/{after}.md"}
        key = result.id[len("daily/") : -len(".md")]
        assert self.body(vault, ws, tier="daily", key=key) == "today entry\n"

    def test_daily_dates_are_separate_documents(self, vault: memvault.Vault, ws: str) -> None:
        """P7: each ISO date is its own daily document."""
        self.put(vault, ws, "monday\n", tier="daily", key="2026-03-02")
        self.put(vault, ws, "tuesday\n", tier="daily", key="2026-03-03")
        assert self.body(vault, ws, tier="daily", key="2026-03-02") == "monday\n"
        assert self.body(vault, ws, tier="daily", key="2026-03-03") == "tuesday\n"

    @pytest.mark.parametrize("key", ["yesterday", "2026-13-01", "2026-02-30", "2026/01/01", "../2026-01-01"])
    def test_daily_key_must_be_an_iso_date(self, key: str) -> None:
        """P7: a daily key that is not a real YYYY-MM-DD date is InvalidRequest."""
        with pytest.raises(memvault.InvalidRequest):
            memvault.RetainRequest(workspace_id="w", agent_id="a", tier="daily", key=key, content="x", mode="append")

    def test_peers_requires_a_key(self) -> None:
        """P7: peers without the peer's slug is InvalidRequest."""
        with pytest.raises(memvault.InvalidRequest):
            memvault.RetainRequest(workspace_id="w", agent_id="a", tier="peers", content="x", mode="append")

    @pytest.mark.parametrize("key", ["a/b", "a\\b", "..", "x..y", "a\x00b", ".dot", "white space"])
    def test_peers_key_with_path_characters_is_invalid(self, vault: memvault.Vault, ws: str, key: str) -> None:
        """P7: keys with '/', '\\', '..', NUL or outside the identifier rule are InvalidRequest; nothing is written."""
        with pytest.raises(memvault.InvalidRequest):
            self.put(vault, ws, "peer kumquat\n", tier="peers", key=key)
        assert self.find(vault, ws, "kumquat") == []

    def test_peers_slugs_are_separate_documents(self, vault: memvault.Vault, ws: str) -> None:
        """P7: each peer slug is its own document."""
        self.put(vault, ws, "alice likes tea\n", tier="peers", key="alice")
        self.put(vault, ws, "bob likes coffee\n", tier="peers", key="bob")
        assert self.body(vault, ws, tier="peers", key="alice") == "alice likes tea\n"
        assert self.body(vault, ws, tier="peers", key="bob") == "bob likes coffee\n"

    def test_other_tiers_ignore_the_key(self, vault: memvault.Vault, ws: str) -> None:
        """P7: AGENT ignores key: the id is AGENT.md and a keyless read sees the body."""
        result = self.put(vault, ws, "keyed agent\n", key="ignored-key")
        assert result.id == "AGENT.md"
        assert self.body(vault, ws) == "keyed agent\n"

    def test_lessons_is_read_only_through_retain(self) -> None:
        """P8: retain to lessons is InvalidRequest saying it is read-only."""
        with pytest.raises(memvault.InvalidRequest, match="read-only"):
            memvault.RetainRequest(workspace_id="w", agent_id="a", tier="lessons", content="x", mode="append")

    def test_lessons_reads_as_an_empty_document(self, vault: memvault.Vault, ws: str) -> None:
        """P8/P21: lessons can be read; with nothing curated it is empty, labelled lessons.md."""
        result = vault.read(memvault.ReadRequest(workspace_id=ws, agent_id="agent-1", tier="lessons"))
        assert (result.id, result.content) == ("lessons.md", "")


class ModeTests(SuiteBase):
    """replace and append (P5, P6)."""

    def test_mode_is_required(self) -> None:
        """P5: there is no default mode."""
        with pytest.raises(memvault.InvalidRequest, match="mode"):
            memvault.RetainRequest(workspace_id="w", agent_id="a", tier="AGENT", content="x")

    @pytest.mark.parametrize("mode", ["", "Append", "upsert", "merge"])
    def test_unknown_mode_is_invalid(self, mode: str) -> None:
        """P5: a mode other than replace or append is InvalidRequest."""
        with pytest.raises(memvault.InvalidRequest):
            memvault.RetainRequest(workspace_id="w", agent_id="a", tier="AGENT", content="x", mode=mode)

    def test_replace_overwrites_the_body(self, vault: memvault.Vault, ws: str) -> None:
        """P5: replace makes the body exactly the new content."""
        self.put(vault, ws, "old body\n", mode="replace")
        result = self.put(vault, ws, "new body\n", mode="replace")
        assert self.body(vault, ws) == "new body\n"
        assert result.bytes == len(b"new body\n")

    def test_replace_after_appends_drops_the_old_text(self, vault: memvault.Vault, ws: str) -> None:
        """P5/P17: after replace, recall no longer finds the replaced text."""
        self.put(vault, ws, "obsolete flamingo\n")
        self.put(vault, ws, "current heron\n", mode="replace")
        assert self.find(vault, ws, "flamingo") == []
        assert len(self.find(vault, ws, "heron")) == 1

    def test_append_concatenates_raw_bytes_without_separator(self, vault: memvault.Vault, ws: str) -> None:
        """P6: append adds no newline or space between writes."""
        self.put(vault, ws, "abc")
        self.put(vault, ws, "def")
        self.put(vault, ws, "\nghi")
        assert self.body(vault, ws) == "abcdef\nghi"

    def test_append_to_a_missing_document_creates_it(self, vault: memvault.Vault, ws: str) -> None:
        """P6: the first append is the whole body."""
        result = self.put(vault, ws, "first line", tier="pins")
        assert self.body(vault, ws, tier="pins") == "first line"
        assert result.bytes == len(b"first line")

    def test_empty_content_is_invalid(self) -> None:
        """P6: content must be non-empty."""
        with pytest.raises(memvault.InvalidRequest):
            memvault.RetainRequest(workspace_id="w", agent_id="a", tier="AGENT", content="", mode="append")

    def test_lone_surrogate_content_is_invalid(self) -> None:
        """P6: content must be valid UTF-8."""
        with pytest.raises(memvault.InvalidRequest):
            memvault.RetainRequest(workspace_id="w", agent_id="a", tier="AGENT", content="bad \udcff", mode="append")

    def test_unicode_and_whitespace_round_trip_exactly(self, vault: memvault.Vault, ws: str) -> None:
        """P6/P21: the stored body is byte-for-byte what was written (CRLF, tabs, emoji, combining marks)."""
        body = "line one\r\n\ttabbed  trailing  \nemoji 🦉 cafe\u0301 中文\n\n\nlast"
        self.put(vault, ws, body, mode="replace")
        assert self.body(vault, ws) == body


class CapTests(SuiteBase):
    """Size caps on the final body, and the 80 % warning, at exactly the boundaries (P9)."""

    @pytest.mark.parametrize("tier", _WRITABLE)
    def test_body_exactly_at_the_cap_is_accepted(self, vault: memvault.Vault, ws: str, tier: str) -> None:
        """P9: a final body of exactly the cap succeeds, with the 100% warning."""
        cap = _CAPS[tier]
        result = self.put(vault, ws, "x" * cap, tier=tier, key=_KEYS.get(tier, ""), mode="replace")
        assert result.bytes == cap
        assert f"{cap} of {cap} bytes, 100%" in result.warning

    @pytest.mark.parametrize("tier", _WRITABLE)
    def test_one_byte_over_the_cap_raises_cap_exceeded(self, vault: memvault.Vault, ws: str, tier: str) -> None:
        """P9: cap + 1 bytes is CapExceeded carrying tier, cap, projected and current size."""
        cap = _CAPS[tier]
        with pytest.raises(memvault.CapExceeded) as caught:
            self.put(vault, ws, "x" * (cap + 1), tier=tier, key=_KEYS.get(tier, ""), mode="replace")
        assert (caught.value.tier, caught.value.cap, caught.value.projected, caught.value.current) == (
            tier,
            cap,
            cap + 1,
            0,
        )

    def test_cap_exceeded_leaves_the_stored_document_unchanged(self, vault: memvault.Vault, ws: str) -> None:
        """P9: a rejected write changes nothing, and current reports the stored size."""
        self.put(vault, ws, "kept persona\n", tier="PERSONA")
        with pytest.raises(memvault.CapExceeded) as caught:
            self.put(vault, ws, "y" * 1500, tier="PERSONA")
        assert caught.value.current == len(b"kept persona\n")
        assert caught.value.projected == len(b"kept persona\n") + 1500
        assert self.body(vault, ws, tier="PERSONA") == "kept persona\n"

    def test_append_is_capped_on_the_final_body(self, vault: memvault.Vault, ws: str) -> None:
        """P9: the cap applies to existing body + appended content, not to the write alone."""
        self.put(vault, ws, "a" * 1000, tier="peers", key="dan")
        self.put(vault, ws, "b" * 500, tier="peers", key="dan")
        with pytest.raises(memvault.CapExceeded):
            self.put(vault, ws, "c", tier="peers", key="dan")
        assert self.body(vault, ws, tier="peers", key="dan") == "a" * 1000 + "b" * 500

    def test_cap_counts_utf8_bytes_not_characters(self, vault: memvault.Vault, ws: str) -> None:
        """P9: 751 two-byte characters (1502 bytes) exceed PERSONA's 1500-byte cap."""
        with pytest.raises(memvault.CapExceeded):
            self.put(vault, ws, "é" * 751, tier="PERSONA", mode="replace")
        assert self.put(vault, ws, "é" * 750, tier="PERSONA", mode="replace").bytes == 1500

    @pytest.mark.parametrize("tier", _WRITABLE)
    def test_warning_at_exactly_80_percent(self, vault: memvault.Vault, ws: str, tier: str) -> None:
        """P9: at 80 % of the cap the write succeeds with "N of C bytes, 80%"."""
        cap = _CAPS[tier]
        size = cap * 8 // 10
        result = self.put(vault, ws, "w" * size, tier=tier, key=_KEYS.get(tier, ""), mode="replace")
        assert f"{size} of {cap} bytes, 80%" in result.warning

    @pytest.mark.parametrize("tier", _WRITABLE)
    def test_no_warning_one_byte_below_80_percent(self, vault: memvault.Vault, ws: str, tier: str) -> None:
        """P9: below 80 % there is no warning."""
        cap = _CAPS[tier]
        result = self.put(vault, ws, "w" * (cap * 8 // 10 - 1), tier=tier, key=_KEYS.get(tier, ""), mode="replace")
        assert result.warning == ""

    def test_warning_reports_the_final_body_after_append(self, vault: memvault.Vault, ws: str) -> None:
        """P9: the warning's N is the size after the append; P is rounded down (3399 of 4000 is 84%)."""
        assert self.put(vault, ws, "a" * 3000).warning == ""
        result = self.put(vault, ws, "b" * 399)
        assert f"3399 of 4000 bytes, {3399 * 100 // 4000}%" in result.warning

    def test_replace_is_capped_on_the_new_body_alone(self, vault: memvault.Vault, ws: str) -> None:
        """P9/P5: a replace's projected size is the new body, not the old body plus it: 3000 bytes replacing
        3000 bytes fits AGENT's 4000 without a warning, and an oversize replace reports projected = its own size."""
        self.put(vault, ws, "a" * 3000, mode="replace")
        result = self.put(vault, ws, "b" * 3000, mode="replace")
        assert (result.bytes, result.warning) == (3000, "")
        assert "3500 of 4000 bytes" in self.put(vault, ws, "c" * 3500, mode="replace").warning
        with pytest.raises(memvault.CapExceeded) as caught:
            self.put(vault, ws, "d" * 4001, mode="replace")
        assert (caught.value.current, caught.value.projected) == (3500, 4001)
        assert self.body(vault, ws) == "c" * 3500

    def test_a_refused_write_is_never_recalled(self, vault: memvault.Vault, ws: str) -> None:
        """P9/P20: a write refused by the cap leaves no trace in search: its text is not recalled and the
        text it would have replaced still is."""
        self.put(vault, ws, "steady baseline heron\n", tier="PERSONA", mode="replace")
        with pytest.raises(memvault.CapExceeded):
            self.put(vault, ws, "refused albatross\n" + "x" * 1500, tier="PERSONA", mode="replace")
        with pytest.raises(memvault.CapExceeded):
            self.put(vault, ws, "appended albatross\n" + "y" * 1490, tier="PERSONA")
        assert self.find(vault, ws, "albatross") == []
        assert [h.line for h in self.find(vault, ws, "heron")] == [1]
        assert self.body(vault, ws, tier="PERSONA") == "steady baseline heron\n"

    def test_a_refused_write_to_a_new_document_creates_nothing(self, vault: memvault.Vault, ws: str) -> None:
        """P9/P23: a refused first write leaves no document: read is empty, recall finds nothing, and
        forgetting it removes 0."""
        with pytest.raises(memvault.CapExceeded):
            self.put(vault, ws, "gannet " + "z" * 1500, tier="peers", key="nemo")
        assert self.body(vault, ws, tier="peers", key="nemo") == ""
        assert self.find(vault, ws, "gannet") == []
        assert self.drop(vault, ws, label="peers/nemo.md") == 0
