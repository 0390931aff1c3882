"""docs/contract-coverage.md stays true to the suite: every test it lists exists and cites that line,
every provider-contract line P1-P28 has a test, and every non-scanner test is listed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memvault_parity import ProviderSuite

_DOC = Path(__file__).resolve().parents[2] / "docs" / "contract-coverage.md"
_ROW = re.compile(r"^\| (P\d+) \|[^|]*\|(.*)\|$", re.MULTILINE)

pytestmark = pytest.mark.skipif(not _DOC.is_file(), reason="runs from a source checkout only")


def _cited() -> dict[str, set[str]]:
    cited: dict[str, set[str]] = {}
    for name in dir(ProviderSuite):
        if name.startswith("test_"):
            doc = getattr(ProviderSuite, name).__doc__ or ""
            for number in set(re.findall(r"\bP\d+\b", doc)):
                cited.setdefault(number, set()).add(name)
    return cited


def _listed() -> dict[str, set[str]]:
    return {m.group(1): set(re.findall(r"`(test_\w+)`", m.group(2))) for m in _ROW.finditer(_DOC.read_text())}


def test_every_listed_test_exists_and_cites_its_line() -> None:
    """The scanner's rows (P19, P29-P31, its own module) are its owner's to keep; the rest must be exact."""
    cited = _cited()
    scanner_lines = {"P19", "P29", "P30", "P31"}
    stale = {
        (line, t)
        for line, tests in _listed().items()
        for t in tests
        if t not in cited.get(line, set()) and line not in scanner_lines and not re.match(r"test_p\d+_", t)
    }
    assert stale == set()


def test_every_provider_contract_line_has_a_test() -> None:
    cited = _cited()
    assert [f"P{i}" for i in range(1, 29) if not cited.get(f"P{i}")] == []


def test_every_test_outside_the_scanner_module_is_listed() -> None:
    listed = _listed()
    missing = {
        (line, t)
        for line, tests in _cited().items()
        for t in tests
        if getattr(ProviderSuite, t).__module__ != "memvault_parity.scanner" and t not in listed.get(line, set())
    }
    assert missing == set()
