"""Recall through the sqlite provider (contract P14-P18, P3)."""

from __future__ import annotations

import hashlib

import pytest
from sqlite_helpers import recall, retain

import memvault


def test_phrase_lines_rank_above_term_only_lines_p17(vault: memvault.Vault) -> None:
    retain(vault, "the metric units were discussed\nshe prefers metric units for cooking\nunits metric\n")
    hits = recall(vault, "metric units")
    # P17 orders phrase lines above term-only lines; among phrase lines the context signals decide.
    assert {h.line for h in hits[:2]} == {1, 2}
    assert all(h.score > 0.5 for h in hits[:2])
    assert hits[2].line == 3
    assert hits[2].score < 0.5


def test_every_phrase_line_is_returned_up_to_the_limit_p17(vault: memvault.Vault) -> None:
    body = "".join(f"noise line {i} about apples and apples\n" for i in range(30))
    body += "".join(f"entry {i}: green tea is good\n" for i in range(15))
    retain(vault, body, tier="pins")
    hits = recall(vault, "green tea", limit=20)
    assert sum(1 for h in hits if "green tea" in h.snippet) == 15


def test_line_sharing_no_term_is_never_returned_p17(vault: memvault.Vault) -> None:
    retain(vault, "apples are red\nbananas are yellow\n")
    hits = recall(vault, "apples")
    assert [h.snippet for h in hits] == ["apples are red"]


def test_matching_is_case_insensitive_p17(vault: memvault.Vault) -> None:
    retain(vault, "Prefers METRIC Units.\n")
    assert [h.line for h in recall(vault, "metric UNITS")] == [1]


def test_natural_language_question_finds_answer_line_p17(vault: memvault.Vault) -> None:
    retain(vault, "Likes jazz.\nPrefers metric units.\nLives in Lyon.\n")
    hits = recall(vault, "What units does she prefer?")
    assert hits[0].snippet == "Prefers metric units."


@pytest.mark.parametrize(
    "query",
    [
        '"unbalanced',
        "tea*",
        "NEAR(tea coffee)",
        "col:tea",
        "(tea",
        "tea AND",
        "OR",
        "NOT tea",
        '"" ^ - + {}',
        "'; DROP",
    ],
)
def test_fts_syntax_in_query_is_plain_text_and_never_raises(vault: memvault.Vault, query: str) -> None:
    retain(vault, "green tea in the morning\nnot today\n")
    hits = recall(vault, query)
    assert isinstance(hits, list)


def test_query_words_that_are_fts_operators_match_as_words(vault: memvault.Vault) -> None:
    retain(vault, "the NEAR field office\nunrelated\n")
    assert [h.line for h in recall(vault, "near")] == [1]


def test_scores_lie_in_unit_interval_sorted_descending_p18(vault: memvault.Vault) -> None:
    retain(vault, "".join(f"tea {'coffee ' * (i % 4)}line {i}\n" for i in range(25)))
    hits = recall(vault, "tea coffee")
    scores = [h.score for h in hits]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)


def test_more_query_terms_in_a_line_score_higher(vault: memvault.Vault) -> None:
    retain(vault, "zebra only\nzebra and giraffe together\nnothing\n")
    hits = recall(vault, "giraffe zebra")
    assert [h.line for h in hits] == [2, 1]


def test_recall_never_crosses_agents_or_workspaces_p3(vault: memvault.Vault) -> None:
    retain(vault, "secret plan alpha\n", agent_id="other")
    retain(vault, "secret plan alpha\n", workspace_id="w2")
    assert recall(vault, "secret plan alpha") == []


def test_recall_reads_crew_and_agent_partitions_together_p16(vault: memvault.Vault) -> None:
    retain(vault, "agent knows tea\n")
    retain(vault, "crew knows tea\n", tier="CREW", crew_id="c1")
    hits = recall(vault, "tea", crew_id="c1")
    assert {h.source for h in hits} == {"AGENT.md", "CREW.md"}


def test_tier_filter_limits_recall_to_that_tier_p16(vault: memvault.Vault) -> None:
    retain(vault, "tea in agent\n")
    retain(vault, "tea in pins\n", tier="pins")
    assert [h.source for h in recall(vault, "tea", tier="pins")] == ["pins.md"]


def test_append_reindexes_the_extended_last_line_p6(vault: memvault.Vault) -> None:
    retain(vault, "first line\nsecond half")
    retain(vault, " continues with walrus\nthird\n")
    hits = recall(vault, "walrus")
    assert [(h.line, h.snippet) for h in hits] == [(2, "second half continues with walrus")]
    assert recall(vault, "second half continues")
    assert recall(vault, "half")[0].line == 2


def test_replace_drops_old_lines_from_the_index(vault: memvault.Vault) -> None:
    retain(vault, "old walrus fact\n")
    retain(vault, "new penguin fact\n", mode="replace")
    assert recall(vault, "walrus") == []
    assert [h.snippet for h in recall(vault, "penguin")] == ["new penguin fact"]


def test_hit_lines_are_one_based_and_count_blank_lines_p18(vault: memvault.Vault) -> None:
    retain(vault, "\n\nthird line has otter\n")
    assert recall(vault, "otter")[0].line == 3


def test_long_line_snippet_is_at_most_500_chars_and_holds_the_match_p18(vault: memvault.Vault) -> None:
    retain(vault, "filler " * 200 + "kingfisher sighting " + "filler " * 200 + "\n", tier="pins")
    hit = recall(vault, "kingfisher")[0]
    assert len(hit.snippet) <= 500
    assert "kingfisher" in hit.snippet


def test_non_ascii_terms_are_searchable(vault: memvault.Vault) -> None:
    greek = "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1"  # "Kalimera" in Greek letters
    retain(vault, f"Café crème à Zürich\n{greek} world\nsnake_case_name here\n")
    assert [h.line for h in recall(vault, "zürich")] == [1]
    assert [h.line for h in recall(vault, greek.upper())] == [2]
    assert [h.line for h in recall(vault, "snake_case_name")] == [3]


def test_partitions_sharing_an_fts_shard_stay_apart_p3(vault: memvault.Vault) -> None:
    # More agents than FTS shards: some partitions share a shard and differ only by rowid range.
    for n in range(70):
        retain(vault, f"shared keyword from agent{n}\n", agent_id=f"agent{n}")
    for n in (0, 1, 64, 65, 69):
        hits = recall(vault, "shared keyword", agent_id=f"agent{n}")
        assert [h.snippet for h in hits] == [f"shared keyword from agent{n}"]


def test_hits_carry_the_current_body_digest_after_append_and_replace(vault: memvault.Vault) -> None:
    retain(vault, "plum one\n", tier="pins")
    retain(vault, "plum two\n", tier="pins")
    assert {h.digest for h in recall(vault, "plum")} == {hashlib.sha256(b"plum one\nplum two\n").hexdigest()}
    retain(vault, "plum three\n", tier="pins", mode="replace")
    assert [h.digest for h in recall(vault, "plum")] == [hashlib.sha256(b"plum three\n").hexdigest()]


def _fill_four_days(vault: memvault.Vault, line: str) -> None:
    """1,600 lines (above the provider's candidate budget): ``line`` numbered ``{i}``, 400 a day."""
    for day in range(1, 5):
        retain(vault, "".join(line.format(i=i) + "\n" for i in range(400)), tier="daily", key=f"2024-04-0{day}")


def test_a_partition_where_every_line_shares_a_query_term_still_ranks_the_best_lines_first(
    vault: memvault.Vault,
) -> None:
    # 1,500 candidate lines (above the provider's candidate budget): the scored subset must
    # keep the lines holding a rare term, and the lines holding most of the query's terms.
    _fill_four_days(vault, "we talked about the garden and the weather, day {i}")
    retain(vault, "the garden party had music and a walrus\n", tier="daily", key="2024-05-01")
    retain(vault, "music in the garden, weather permitting\n", tier="daily", key="2024-05-02")
    hits = recall(vault, "garden music weather walrus", limit=5)
    assert hits[0].snippet == "the garden party had music and a walrus"
    assert hits[1].snippet == "music in the garden, weather permitting"
    assert all(h.score < 0.5 for h in hits)
    phrase = recall(vault, "about the garden", limit=3)
    assert len(phrase) == 3
    assert all(h.score > 0.5 and "about the garden" in h.snippet for h in phrase)


def test_one_common_word_over_more_lines_than_the_budget_still_finds_its_phrase_line(
    vault: memvault.Vault,
) -> None:
    # 1,600 lines hold the only query term ("rivers" stems to "river"); one line holds the word itself.
    _fill_four_days(vault, "a long line about rivers and many other things, number {i}")
    retain(vault, "the river\n", tier="daily", key="2024-05-01")
    hits = recall(vault, "river", limit=3)
    assert len(hits) == 3
    assert hits[0].snippet == "the river"
    assert hits[0].score > 0.5  # the whole query as a phrase (P17)
    assert all(h.score < 0.5 for h in hits[1:])


def test_a_rare_term_above_the_budget_still_returns_the_limit_of_hits(vault: memvault.Vault) -> None:
    # 1,600 lines hold "garden" and "weather" (more than the candidate budget), two the rare "walrus",
    # none all three: the narrowest query keeps the two walrus lines only, and the lines holding the
    # other terms (the shortest first) fill the scored subset up to the budget, so the limit is met.
    _fill_four_days(vault, "we talked about the garden and the weather, day {i}")
    retain(vault, "a walrus\nthe walrus again\n", tier="daily", key="2024-05-01")
    hits = recall(vault, "walrus garden weather", limit=10)
    assert len(hits) == 10
    assert {h.snippet for h in hits[:2]} == {"a walrus", "the walrus again"}
    assert all("garden" in h.snippet and "weather" in h.snippet for h in hits[2:])
