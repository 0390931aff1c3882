"""A check that work grows in proportion to its input: for the tests of inputs an attacker sizes."""

from __future__ import annotations

import time
from collections.abc import Callable


def assert_grows_in_proportion(run: Callable[[int], object], small: int, large: int, slack: float = 3.0) -> None:
    """``run(large)`` takes at most ``slack`` times ``large / small`` the time of ``run(small)`` (best of three
    each, after a warm-up): linear work passes with room for noise, quadratic work takes ``large / small``
    times more than that and fails."""

    def seconds(size: int) -> float:
        started = time.perf_counter()
        run(size)
        return time.perf_counter() - started

    seconds(max(1, small // 10))  # warm the caches
    few = min(seconds(small) for _ in range(3))
    many = min(seconds(large) for _ in range(3))
    assert many < slack * (large / small) * few, (few, many)
