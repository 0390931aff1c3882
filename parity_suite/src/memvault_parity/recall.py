"""recall: matching, ranking, limits, snippets, scores and labels (P4, P14, P15, P17, P18, P19)."""

from __future__ import annotations

import hashlib

import pytest

import memvault
from memvault_parity.base import LABEL_SHAPE, SuiteBase
from memvault_parity.versions import since

__all__ = ["RecallTests"]


def _numbered(word: str, count: int, prefix: str = "item") -> str:
    return "".join(f"{prefix} {word} {i}\n" for i in range(count))


class RecallTests(SuiteBase):
    """What recall returns and in which order."""

    @pytest.mark.parametrize("query", [" ", "\t\n", "   \u3000 "])
    def test_blank_query_is_invalid(self, query: str) -> None:
        """P14: a query without a non-space character is InvalidRequest."""
        with pytest.raises(memvault.InvalidRequest):
            memvault.RecallRequest(workspace_id="w", agent_id="a", query=query)

    def test_recall_on_an_empty_store_returns_an_empty_list(self, vault: memvault.Vault, ws: str) -> None:
        """P18: hits is a list, possibly empty; quarantined is a list."""
        result = vault.recall(memvault.RecallRequest(workspace_id=ws, agent_id="agent-1", query="anything"))
        assert result.hits == []
        assert result.quarantined == []

    def test_matching_is_case_insensitive(self, vault: memvault.Vault, ws: str) -> None:
        """P17: UPPER, lower and Mixed case queries find the same line."""
        self.put(vault, ws, "Prefers METRIC Units.\n")
        for query in ("metric units", "METRIC UNITS", "Metric uNiTs"):
            hits = self.find(vault, ws, query)
            assert [(h.source, h.line) for h in hits] == [("AGENT.md", 1)], query

    def test_matching_is_case_insensitive_beyond_ascii(self, vault: memvault.Vault, ws: str) -> None:
        """P17: case folding covers non-ASCII letters."""
        self.put(vault, ws, "Meeting at ZÜRICH office\n")
        assert [h.line for h in self.find(vault, ws, "zürich")] == [1]

    def test_every_phrase_line_is_returned(self, vault: memvault.Vault, ws: str) -> None:
        """P17: each line containing the whole query as a phrase is a hit."""
        self.put(vault, ws, "the blue whale sings\nnothing here\na blue whale again\nwhale and blue apart\n")
        lines = {h.line for h in self.find(vault, ws, "blue whale")}
        assert {1, 3} <= lines

    def test_phrase_lines_rank_above_term_only_lines(self, vault: memvault.Vault, ws: str) -> None:
        """P17: lines holding the phrase outrank lines that only share terms, however often."""
        body = (
            "fox fox fox fox brown brown brown brown\n"  # terms only, high term frequency
            "yesterday a brown fox ran across the long field\n"  # phrase, long line
            "fox brown\n"  # terms only, wrong order, shortest line
            "brown bear\n"  # one term
            "the quick brown fox jumps over the lazy sleeping dog\n"  # phrase, long line
        )
        self.put(vault, ws, body)
        hits = self.find(vault, ws, "brown fox")
        assert {h.line for h in hits[:2]} == {2, 5}
        assert min(h.score for h in hits[:2]) > max((h.score for h in hits[2:]), default=0.0)

    def test_phrase_lines_fill_the_limit_before_term_only_lines(self, vault: memvault.Vault, ws: str) -> None:
        """P17/P15: with 25 phrase lines and many term-only lines, all 20 hits hold the phrase."""
        # term-only lines are shorter than phrase lines, so term statistics alone would rank them first
        body = "".join(f"panda red {i}\nlate sighting of one red panda near the old barn {i}\n" for i in range(25))
        self.put(vault, ws, body, tier="pins")
        hits = self.find(vault, ws, "red panda", tier="pins")
        assert len(hits) == 20
        assert all("red panda" in h.snippet.lower() for h in hits)

    def test_line_sharing_no_term_is_never_returned(self, vault: memvault.Vault, ws: str) -> None:
        """P17: only lines sharing a term with the query are hits."""
        self.put(vault, ws, "apple banana\ncherry durian\nelderberry fig\n")
        assert [h.line for h in self.find(vault, ws, "banana")] == [1]
        assert self.find(vault, ws, "grapefruit") == []

    @pytest.mark.parametrize(
        ("question", "answer"),
        [
            ("What units does she prefer?", "Prefers metric units."),
            ("Which tea does she like?", "Likes green tea, no sugar."),
            ("Where is the office located?", "Office located in Berlin, Mitte."),
            ("Who are her dentists?", "Dentist: Dr Okafor, Tuesdays."),
        ],
    )
    def test_natural_language_question_finds_the_answering_line(
        self, vault: memvault.Vault, ws: str, question: str, answer: str
    ) -> None:
        """P17/P18: a question finds the line that answers it by its terms (any inflection), not by exact
        substring: the answer is among the top 3 hits, which are sorted with scores in [0, 1].

        Which other lines come back, and in which order, is the search engine's business: a provider on
        its own full-text or vector index passes without copying memvault.search's stop words or stemmer.
        """
        facts = [
            "Prefers metric units.",
            "Likes green tea, no sugar.",
            "Office located in Berlin, Mitte.",
            "Dentist: Dr Okafor, Tuesdays.",
            "Birthday on the 3rd of May.",
            "Allergic to peanuts.",
            "Drives a blue bicycle to work.",
            "Sister lives in Lisbon.",
            "Reads crime novels before bed.",
            "Plays chess on Sundays.",
        ]
        self.put(vault, ws, "".join(f"{fact}\n" for fact in facts))
        hits = self.find(vault, ws, question)
        assert facts.index(answer) + 1 in [h.line for h in hits[:3]]
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert all(0.0 <= h.score <= 1.0 for h in hits)
        assert len(hits) <= 20

    def test_term_matching_finds_a_line_without_the_full_phrase(self, vault: memvault.Vault, ws: str) -> None:
        """P17: lines sharing some of the query's terms are returned, below phrase lines."""
        self.put(vault, ws, "deploy staging Friday\n")
        hits = self.find(vault, ws, "when is the staging deploy")
        assert [h.line for h in hits] == [1]

    @pytest.mark.parametrize("limit", [0, -1, -50, 21, 1000])
    def test_out_of_range_limit_means_twenty(self, vault: memvault.Vault, ws: str, limit: int) -> None:
        """P15: limit <= 0 or > 20 becomes 20."""
        self.put(vault, ws, _numbered("kiwi", 30), tier="pins")
        assert len(self.find(vault, ws, "kiwi", limit=limit)) == 20

    @pytest.mark.parametrize("limit", [1, 3, 20])
    def test_limit_within_range_is_respected(self, vault: memvault.Vault, ws: str, limit: int) -> None:
        """P15: with more matches than the limit, exactly limit hits come back."""
        self.put(vault, ws, _numbered("mango", 25), tier="pins")
        assert len(self.find(vault, ws, "mango", limit=limit)) == limit

    def test_never_more_than_twenty_hits_across_documents(self, vault: memvault.Vault, ws: str) -> None:
        """P15: many matching lines spread over tiers still give at most 20 hits."""
        for tier, key in (("AGENT", ""), ("pins", ""), ("daily", "2026-04-01"), ("peers", "eve"), ("PERSONA", "")):
            self.put(vault, ws, _numbered("papaya", 12), tier=tier, key=key)
        assert len(self.find(vault, ws, "papaya")) == 20

    def test_fewer_matches_than_the_limit_returns_them_all(self, vault: memvault.Vault, ws: str) -> None:
        """P17: every matching line comes back when there are fewer than the limit."""
        self.put(vault, ws, _numbered("lychee", 7))
        assert sorted(h.line for h in self.find(vault, ws, "lychee")) == list(range(1, 8))

    def test_hits_are_sorted_by_score_highest_first(self, vault: memvault.Vault, ws: str) -> None:
        """P18: scores never increase down the list."""
        self.put(
            vault,
            ws,
            "solar panel maintenance schedule\nsolar eclipse\npanel discussion on solar panel costs\n"
            "maintenance window\nsolar panel\n",
        )
        hits = self.find(vault, ws, "solar panel maintenance")
        assert len(hits) >= 3
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)

    def test_scores_are_between_zero_and_one(self, vault: memvault.Vault, ws: str) -> None:
        """P18: every score is a number in [0, 1]."""
        self.put(vault, ws, "quartz " * 40 + "\nquartz crystal\nrose quartz crystal quartz\n")
        hits = self.find(vault, ws, "quartz crystal")
        assert hits
        assert all(isinstance(h.score, float | int) and 0.0 <= h.score <= 1.0 for h in hits)

    def test_line_numbers_are_one_based_and_point_at_the_matching_line(self, vault: memvault.Vault, ws: str) -> None:
        """P18: hit.line indexes the stored body's lines from 1."""
        body = "alpha\n\nbeta gamma\nzeta\ndelta beta\n"
        self.put(vault, ws, body)
        hits = self.find(vault, ws, "beta")
        assert sorted(h.line for h in hits) == [3, 5]
        lines = self.body(vault, ws).splitlines()
        assert all("beta" in lines[h.line - 1] for h in hits)

    def test_snippet_is_at_most_500_characters_and_contains_the_match(self, vault: memvault.Vault, ws: str) -> None:
        """P18: a long line is cut to a 500-character snippet around the matched text."""
        line = "filler " * 250 + "Zebracorn" + " padding" * 200 + "\n"
        self.put(vault, ws, line, tier="daily", key="2026-05-05")
        hits = self.find(vault, ws, "zebracorn")
        assert len(hits) == 1
        assert len(hits[0].snippet) <= 500
        assert "zebracorn" in hits[0].snippet.lower()

    def test_short_line_snippet_is_the_line_text(self, vault: memvault.Vault, ws: str) -> None:
        """P18: a short matching line's snippet holds the matched text of that line."""
        self.put(vault, ws, "first\nCall Priya about the invoice\n")
        (hit,) = self.find(vault, ws, "invoice")
        assert "invoice" in hit.snippet
        assert "Priya" in hit.snippet

    @pytest.mark.parametrize(("tier", "key", "label"), [
        ("AGENT", "", "AGENT.md"),
        ("PERSONA", "", "PERSONA.md"),
        ("pins", "", "pins.md"),
        ("daily", "2026-06-30", "daily/2026-06-30.md"),
        ("peers", "frank.ops", "peers/frank.ops.md"),
    ])  # fmt: skip
    def test_hit_source_is_the_document_label(
        self, vault: memvault.Vault, ws: str, tier: str, key: str, label: str
    ) -> None:
        """P18/P4: source is the tier-relative label."""
        self.put(vault, ws, "tangerine label check\n", tier=tier, key=key)
        assert [h.source for h in self.find(vault, ws, "tangerine", tier=tier)] == [label]

    @since("1.0")
    def test_hit_digest_when_given_is_the_sha256_of_the_document_body(self, vault: memvault.Vault, ws: str) -> None:
        """P18/P19: an optional hit digest must be the body's sha256, or the scanner would trust a wrong verdict."""
        self.put(vault, ws, "quince digest check\nsecond line\n", tier="pins")
        self.put(vault, ws, "quince again\n", tier="pins")
        body = vault.read(memvault.ReadRequest(workspace_id=ws, agent_id="agent-1", tier="pins")).content
        for hit in self.find(vault, ws, "quince"):
            assert hit.digest in ("", hashlib.sha256(body.encode("utf-8")).hexdigest())

    def test_hit_sources_never_reveal_paths_or_storage_layout(
        self, vault: memvault.Vault, ws: str, settings: dict[str, object]
    ) -> None:
        """P4: labels hold no absolute path, workspace/agent id, or settings value."""
        self.put(vault, ws, "cobalt one\n")
        self.put(vault, ws, "cobalt two\n", tier="CREW", crew="crew-7")
        self.put(vault, ws, "cobalt three\n", tier="peers", key="gina")
        hits = self.find(vault, ws, "cobalt", crew="crew-7")
        assert len(hits) == 3
        for hit in hits:
            assert LABEL_SHAPE.fullmatch(hit.source), hit.source
            assert not hit.source.startswith(("/", "\\"))
            assert ":" not in hit.source[:3]
            assert ws not in hit.source
            assert "agent-1" not in hit.source
            assert "crew-7" not in hit.source
            for value in settings.values():
                if isinstance(value, str) and len(value) > 3:
                    assert value not in hit.source

    def test_recall_sees_a_write_immediately(self, vault: memvault.Vault, ws: str) -> None:
        """P20: after retain returns, recall in the same process finds it."""
        for i in range(10):
            self.put(vault, ws, f"sequence marker{i}\n")
            assert [h.line for h in self.find(vault, ws, f"marker{i}")] == [i + 1]

    def test_an_unterminated_last_line_is_searched(self, vault: memvault.Vault, ws: str) -> None:
        """P17/P18: the last line counts even without a trailing newline, in a replaced and an appended body."""
        self.put(vault, ws, "first line\nsecond line ends without newline marmalade", mode="replace")
        self.put(vault, ws, "pins line\nlast pins line marmalade", tier="pins")
        hits = self.find(vault, ws, "marmalade")
        assert sorted((h.source, h.line) for h in hits) == [("AGENT.md", 2), ("pins.md", 2)]

    def test_a_word_split_across_two_appends_is_found(self, vault: memvault.Vault, ws: str) -> None:
        """P17/P6: recall searches the stored body, not the pieces written: "...Thurs" + "day ..." is found by
        "thursday" on its one line, once."""
        self.put(vault, ws, "standup notes\nretro moved to Thurs")
        self.put(vault, ws, "day afternoon\n")
        hits = self.find(vault, ws, "thursday")
        assert [h.line for h in hits] == [2]
        assert "thursday" in hits[0].snippet.lower()

    def test_line_numbers_count_across_appends(self, vault: memvault.Vault, ws: str) -> None:
        """P18/P6: lines are numbered in the whole body, whichever append wrote them; a line completed by a
        later append is one line, returned once."""
        self.put(vault, ws, "one\ntwo\n", tier="pins")
        self.put(vault, ws, "three\nfour kestrel\nfive half", tier="pins")
        self.put(vault, ws, " line kestrel\n", tier="pins")
        hits = self.find(vault, ws, "kestrel", tier="pins")
        assert sorted(h.line for h in hits) == [4, 5]

    @pytest.mark.parametrize("phrase_first", [True, False], ids=["phrase-written-first", "phrase-written-last"])
    def test_ranking_and_limit_are_global_across_documents(
        self, vault: memvault.Vault, ws: str, phrase_first: bool
    ) -> None:
        """P15/P17/P18: hits from several documents are ranked together and the limit applies to all of them:
        with limit 3, the two phrase lines lead whichever documents hold them, and exactly 3 sorted hits
        come back."""
        weak = [("AGENT", ""), ("pins", ""), ("peers", "ola")]
        strong = [("PERSONA", ""), ("daily", "2026-10-10")]
        order = strong + weak if phrase_first else weak + strong
        for tier, key in order:
            if (tier, key) in strong:
                self.put(vault, ws, f"note {tier}\nthe harbour storm closed the port today\n", tier=tier, key=key)
            else:
                self.put(vault, ws, "".join(f"storm {i}\nharbour {i}\n" for i in range(6)), tier=tier, key=key)
        hits = self.find(vault, ws, "harbour storm", limit=3)
        assert len(hits) == 3
        assert {h.source for h in hits[:2]} == {"PERSONA.md", "daily/2026-10-10.md"}
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
