"""What ``memvault parity NAME`` tells its user besides the verdict (issue #34): where it works,
and how far a long run is."""

from __future__ import annotations

import io
import re

from memvault_parity.runner import run_parity


def test_a_run_says_where_each_test_works_and_shows_progress_with_an_estimate_apart() -> None:
    out, progress = io.StringIO(), io.StringIO()
    outcome = run_parity(
        "template-provider", keyword="forget_by_subject", out=out, progress=progress, progress_every=0.0
    )
    assert outcome.ok, out.getvalue()[-3000:]
    summary = out.getvalue()
    assert re.search(
        r"^memvault parity template-provider: each test works in a fresh scratch store, such as "
        r"namespace='[^']+'; the run removes them$",
        summary,
        re.MULTILINE,
    )
    lines = progress.getvalue().splitlines()
    assert lines, "no progress was reported"
    total = outcome.passed + outcome.skipped
    for number, line in enumerate(lines, start=1):
        assert re.fullmatch(
            rf"memvault parity template-provider: {number}/{total} tests in \d+ s, about \d+ (s|min) left", line
        ), line
    assert "tests in" not in summary, "progress goes to its own stream, never into the summary"


def test_a_run_on_given_settings_names_them_hiding_secrets() -> None:
    out = io.StringIO()
    run_parity(
        "template-provider",
        {"namespace": "postgresql://bob:hunter2@db/x"},
        keyword="test_forget_twice",
        out=out,
        progress=io.StringIO(),
    )
    first = out.getvalue().splitlines()[0]
    assert first.startswith("memvault parity template-provider: every test works on namespace=")
    assert "postgresql://bob:***@db/x" in first
    assert "hunter2" not in out.getvalue()
