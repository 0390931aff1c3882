"""docs/contract-coverage.md stays true to the suite: every test it lists exists and cites that line,
every provider-contract line P1-P28 has a test, every non-scanner test is listed, and each line's
mutant column names exactly the mutants whose docstrings say they break that line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mutants import MUTANTS

from memvault_parity import ProviderSuite

_DOC = Path(__file__).resolve().parents[2] / "docs" / "contract-coverage.md"
_ROW = re.compile(r"^\| (P\d+) \|[^|]*\|([^|]*)\|([^|]*)\|$", re.MULTILINE)

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


def _mutants_listed() -> dict[str, set[str]]:
    return {m.group(1): set(re.findall(r"`([a-z0-9-]+)`", m.group(3))) for m in _ROW.finditer(_DOC.read_text())}


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


def test_each_lines_mutants_are_listed_exactly() -> None:
    """A mutant appears in the row of every line its docstring names, and nowhere else."""
    expected: dict[str, set[str]] = {}
    for name, mutant in MUTANTS.items():
        for line in mutant.lines:
            expected.setdefault(line, set()).add(name)
    listed = {line: names for line, names in _mutants_listed().items() if names}
    assert listed == expected


def test_every_killing_test_checks_a_line_its_mutant_breaks() -> None:
    """A mutant's killing tests cite at least one of the lines the mutant breaks, so a row's tests and
    mutants belong together."""
    cited = _cited()
    unrelated = {
        (name, killer)
        for name, mutant in MUTANTS.items()
        for killer in mutant.killers
        if not any(killer in cited.get(line, set()) for line in mutant.lines)
    }
    assert unrelated == set()
