"""Which narrower FTS5 query a recall over more lines than the budget scores: the first that fits.

Counting a narrower query's lines is the dear part of such a recall (the widest queries
are OR-s of many AND-s over common words), so the provider counts from the query an
estimate names and walks toward the first that fits. These tests hold that walk to
the plain rule, counting every query from the first, for any estimate.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memvault.search import CANDIDATE_BUDGET, narrowed_levels, narrowing
from memvault_sqlite.search import first_fitting, likely_first_fitting, narrowed_queries


def _first_by_scanning(sizes: list[int], budget: int) -> tuple[int, bool]:
    for k, size in enumerate(sizes):
        if size <= budget:
            return k, True
    return len(sizes) - 1, False


@given(
    sizes=st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=12).map(
        lambda values: sorted(values, reverse=True)
    ),
    start=st.integers(min_value=-3, max_value=15),
    budget=st.integers(min_value=0, max_value=5000),
)
def test_first_fitting_equals_scanning_from_the_first_query_whatever_the_start(
    sizes: list[int], start: int, budget: int
) -> None:
    counted: list[int] = []

    def count(k: int) -> int:
        counted.append(k)
        return sizes[k]

    assert first_fitting(count, len(sizes), start, budget) == _first_by_scanning(sizes, budget)
    assert len(counted) == len(set(counted)), "a query counted twice"


def test_no_query_to_pick_is_an_error_not_a_count_of_query_minus_one() -> None:
    with pytest.raises(ValueError, match="at least one"):
        first_fitting(lambda k: [5][k], 0, 0)


def test_a_right_guess_costs_two_counts_and_the_first_query_one() -> None:
    sizes = [9000, 6000, 2000, 250]
    counted: list[int] = []

    def count(k: int) -> int:
        counted.append(k)
        return sizes[k]

    assert first_fitting(count, 4, 3) == (3, True)
    assert counted == [3, 2]
    counted.clear()
    assert first_fitting(count, 1, 0) == (0, False)
    assert counted == [0]


@given(
    lines=st.dictionaries(
        st.integers(min_value=1, max_value=63), st.integers(min_value=1, max_value=1500), max_size=20
    ),
    others=st.integers(min_value=0, max_value=5000),
)
def test_the_estimate_names_a_query_and_the_walk_finds_the_levels_rule(lines: dict[int, int], others: int) -> None:
    # Lines by the set of the six query terms they hold (a bit mask), and how many hold that set;
    # ``others`` hold none. The narrower queries' sets (a rare term, or at least `level` terms)
    # are counted exactly, as FTS5 would count them.
    terms = [f"t{i}" for i in range(6)]
    df = [sum(n for held, n in lines.items() if held >> i & 1) for i in range(len(terms))]
    rare, levels = narrowing(df)
    assert len(narrowed_queries(terms, df)) == len(levels)
    if not levels:
        return
    rare_bits = sum(1 << i for i in rare)
    level_of = {held: held.bit_count() + len(terms) * bool(held & rare_bits) for held in lines}

    def size(k: int) -> int:
        return sum(n for held, n in lines.items() if level_of[held] >= levels[k])

    start = likely_first_fitting(df, sum(lines.values()) + others)
    assert 0 <= start < len(levels)
    k, fits = first_fitting(size, len(levels), start)
    at_level = Counter[int]()
    for held, n in lines.items():
        at_level[level_of[held]] += n
    wider, chosen = narrowed_levels(at_level, levels)
    assert levels[k] == chosen
    assert (levels[k - 1] if k else 1) == wider
    assert fits == (size(k) <= CANDIDATE_BUDGET)
