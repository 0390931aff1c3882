"""The suite kills deliberately broken providers (see ``mutants.py``).

One nested pytest run (a subprocess, bounded by a timeout) holds a test class
per mutant; each class runs only the suite tests aimed at the contract line
its mutant breaks (a ``-k`` clause per class). Every mutant must make at least
one of them fail. The unmutated memory provider runs the union of all
selections and must pass them all, so a kill is the mutation's doing, not the
harness's.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from mutants import MUTANTS

from memvault_parity.base import child_env

_CLASS = """
class {cls}(ProviderSuite):
    provider = "memory"
    capabilities = MUTANTS[{name!r}].capabilities

    def make_vault(self, settings):
        return memvault.Vault(MUTANTS[{name!r}].factory(), name={name!r}, capabilities=self.capabilities)
"""
_CONTROL = "control-unmutated"
_NAMES = sorted(MUTANTS)


def _class_name(name: str) -> str:
    return f"TestM{_NAMES.index(name):02d}"  # zero-padded: no class name is a substring of another


Outcomes = dict[str, Counter[str]]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    where = tmp_path_factory.mktemp("mutants")
    module = ["import memvault", "from memvault_parity import ProviderSuite", "from mutants import MUTANTS"]
    module += [_CLASS.format(cls=_class_name(n), name=n) for n in _NAMES]
    (where / "test_mutated.py").write_text("\n".join(module), encoding="utf-8")
    (where / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    union = " or ".join(f"({MUTANTS[n].selection})" for n in _NAMES if n != _CONTROL)
    clauses = [f"({_class_name(n)} and ({MUTANTS[n].selection}))" for n in _NAMES if n != _CONTROL]
    clauses.append(f"({_class_name(_CONTROL)} and ({union}))")
    env = child_env()
    env["PYTHONPATH"] = str(Path(__file__).parent) + ":" + env["PYTHONPATH"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=no", "-c", str(where / "pytest.ini"),
         "--rootdir", str(where), "--junitxml", str(where / "junit.xml"), "-k", " or ".join(clauses),
         str(where / "test_mutated.py")],
        capture_output=True, text=True, timeout=300, env=env, cwd=where, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    result: Outcomes = {n: Counter() for n in _NAMES}
    by_class = {_class_name(n): n for n in _NAMES}
    for case in ET.parse(where / "junit.xml").getroot().iter("testcase"):
        name = by_class[case.get("classname", "").rsplit(".", 1)[-1]]
        kinds = {child.tag for child in case}
        kind = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        result[name][kind] += 1
    return result


def test_the_unmutated_memory_provider_passes_every_selection(outcomes: Outcomes) -> None:
    """Control: the harness itself causes no failure, and the selections run real tests."""
    assert outcomes[_CONTROL]["failed"] == 0
    assert outcomes[_CONTROL]["passed"] > 60


@pytest.mark.parametrize("name", [n for n in _NAMES if n != _CONTROL])
def test_the_suite_kills_the_mutant(outcomes: Outcomes, name: str) -> None:
    """Every mutant makes at least one parity test fail."""
    counts = outcomes[name]
    assert counts["passed"] + counts["failed"] > 0, f"selection {MUTANTS[name].selection!r} ran nothing"
    assert counts["failed"] > 0, f"mutant {name} survived {counts['passed']} parity tests"
