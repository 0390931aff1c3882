"""The suite kills deliberately broken providers and passes legitimate ones (see ``mutants.py``).

One nested pytest run (a subprocess, bounded by a timeout) holds a test class
per mutant; each class runs only the suite tests its mutant's docstring names
after "Killed by:", and at least one of them must fail. The controls run too:
the unmutated memory provider runs the union of every mutant's tests and must
pass them all, so a kill is the mutation's doing, not the harness's; the
fairness controls (another ranking engine, a provider that does not name
itself in NotSupported, the write-group base of the P34 mutants) must pass
what they run.
"""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from mutants import CONTROLS, MUTANTS, Mutant

from memvault_parity import ProviderSuite
from memvault_parity.base import child_env

_CLASS = """
class {cls}(ProviderSuite):
    provider = "memory"
    capabilities = ALL[{name!r}].capabilities

    def make_vault(self, settings):
        return memvault.Vault(ALL[{name!r}].factory(), name={name!r}, capabilities=self.capabilities)

    def make_vault_with_embedder(self, settings, embedder):
        return memvault.Vault(
            ALL[{name!r}].factory(), name={name!r}, capabilities=self.capabilities, embedder=embedder,
            background_embedding=False,
        )
"""
_ALL: dict[str, Mutant] = {**MUTANTS, **CONTROLS}
_NAMES = sorted(_ALL)


def _class_name(name: str) -> str:
    return f"TestM{_NAMES.index(name):03d}"  # zero-padded: no class name is a substring of another


def _selection(name: str) -> str:
    if _ALL[name].selection == "*":
        return " or ".join(f"({m.selection})" for m in MUTANTS.values())
    return _ALL[name].selection


class Outcome:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.failed: set[str] = set()
        self.ran: set[str] = set()


Outcomes = dict[str, Outcome]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Outcomes:
    where = tmp_path_factory.mktemp("mutants")
    module = [
        "import memvault",
        "from memvault_parity import ProviderSuite",
        "from mutants import CONTROLS, MUTANTS",
        "ALL = {**MUTANTS, **CONTROLS}",
    ]
    module += [_CLASS.format(cls=_class_name(n), name=n) for n in _NAMES]
    (where / "test_mutated.py").write_text("\n".join(module), encoding="utf-8")
    (where / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    clauses = [f"({_class_name(n)} and ({_selection(n)}))" for n in _NAMES]
    env = child_env()
    env["PYTHONPATH"] = str(Path(__file__).parent) + ":" + env["PYTHONPATH"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=no", "-c", str(where / "pytest.ini"),
         "--rootdir", str(where), "--junitxml", str(where / "junit.xml"), "-k", " or ".join(clauses),
         str(where / "test_mutated.py")],
        capture_output=True, text=True, timeout=300, env=env, cwd=where, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    result: Outcomes = {n: Outcome() for n in _NAMES}
    by_class = {_class_name(n): n for n in _NAMES}
    for case in ET.parse(where / "junit.xml").getroot().iter("testcase"):
        name = by_class[case.get("classname", "").rsplit(".", 1)[-1]]
        kinds = {child.tag for child in case}
        kind = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
        test = case.get("name", "").split("[", 1)[0]
        result[name].counts[kind] += 1
        result[name].ran.add(test)
        if kind == "failed":
            result[name].failed.add(test)
    return result


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_the_controls_pass_what_they_run(outcomes: Outcomes, name: str) -> None:
    """Controls: the harness causes no failure, and the suite accepts legitimate differences."""
    outcome = outcomes[name]
    assert outcome.failed == set()
    assert outcome.counts["passed"] > 0


def test_the_unmutated_provider_runs_every_killing_test(outcomes: Outcomes) -> None:
    """The unmutated provider ran (and passed) every test a mutant names: each kill is the mutation's doing."""
    killers = {k for mutant in MUTANTS.values() for k in mutant.killers}
    assert killers - outcomes["control-unmutated"].ran == set()
    assert outcomes["control-unmutated"].counts["passed"] >= 100


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_the_suite_kills_the_mutant(outcomes: Outcomes, name: str) -> None:
    """Every mutant makes at least one of the tests its docstring names fail."""
    outcome, killers = outcomes[name], set(MUTANTS[name].killers)
    assert outcome.counts["passed"] + outcome.counts["failed"] > 0, f"{name}: {sorted(killers)} ran nothing"
    assert outcome.failed & killers, f"mutant {name} survived {sorted(killers)}"


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_every_mutant_names_its_contract_lines_and_existing_killers(name: str) -> None:
    """A mutant's docstring leads with the lines it breaks and names suite tests that exist."""
    mutant = MUTANTS[name]
    assert mutant.lines, f"{name}: the docstring must start with the contract lines it breaks, e.g. 'P9/P5: ...'"
    assert mutant.killers, f"{name}: the docstring must end with 'Killed by: test_..., test_....'"
    missing = [k for k in mutant.killers if not hasattr(ProviderSuite, k)]
    assert missing == []
    assert all(re.fullmatch(r"P\d+", line) for line in mutant.lines)
