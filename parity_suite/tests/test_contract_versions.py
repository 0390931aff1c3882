"""Contract versions (issue #34): each contract line's version, a provider's declared version, and
what ``memvault parity`` does with the lines newer than it.

The providers here are real plugins: a folder with a ``*.dist-info`` entry point and a
module, on the path of a ``memvault`` subprocess, discovered like any installed plugin.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import memvault
from memvault.contract.versions import CONTRACT_VERSIONS, contract_version_key
from memvault.registry import get_registry
from memvault_parity import ProviderSuite
from memvault_parity.base import child_env
from memvault_parity.versions import LINE_VERSIONS, cited_lines, line_version, version_of_test

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "docs" / "reference" / "contract.md"
_TAGGED = re.compile(r"^- ([PLD]\d+) \[v(\d+\.\d+)\] ", re.MULTILINE)
_NUMBERED = re.compile(r"^- ([PLD]\d+) ", re.MULTILINE)

source_checkout = pytest.mark.skipif(not CONTRACT.is_file(), reason="runs from a source checkout only")

#: The split-append test (P29/P30/P33): P33 is 1.1, so the test is a 1.1 requirement.
_NEWER_TEST = "test_p29_an_injection_split_across_the_append_boundary_is_rejected"
#: A 1.0 test (P15).
_OLDER_TEST = "test_limit_within_range_is_respected"

_PLUGIN = """
import memvault
from mutants import IgnoresLimit, NeverChecksStored


@memvault.hookimpl
def memvault_register_providers(register):
    # NeverChecksStored breaks P33 (1.1) only; IgnoresLimit breaks P15 (1.0).
    register("skips-stored-check", NeverChecksStored, capabilities=NeverChecksStored.capabilities,
             scratch=lambda tmp: {{}}, contract_version={declared!r})
    register("ignores-limit", IgnoresLimit, capabilities=IgnoresLimit.capabilities,
             scratch=lambda tmp: {{}}, contract_version={declared!r})
"""


def _install(where: Path, declared: str | None) -> Path:
    """A plugin distribution on disk: its module and its entry point, as pip would leave them."""
    (where / "versioned_plugin.py").write_text(textwrap.dedent(_PLUGIN.format(declared=declared)))
    info = where / "memvault_versioned_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: memvault-versioned-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[memvault]\nversioned-plugin = versioned_plugin\n")
    return where


def _memvault(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = child_env()
    env["PYTHONPATH"] = f"{site}:{Path(__file__).parent}:{env['PYTHONPATH']}"
    return subprocess.run(
        [sys.executable, "-c", "from memvault.cli.main import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def declares_1_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _install(tmp_path_factory.mktemp("v10"), "1.0")


def test_the_mutants_here_fail_what_they_should() -> None:
    """Guard: the two tests the CLI cases select are the versions they are taken for."""
    assert version_of_test(getattr(ProviderSuite, _NEWER_TEST)) == "1.1"
    assert version_of_test(getattr(ProviderSuite, _OLDER_TEST)) == "1.0"


def test_a_newer_line_a_provider_misses_is_listed_not_failed(declares_1_0: Path) -> None:
    """A provider declaring 1.0 that misses a 1.1 line: exit 0, and the line listed by its version."""
    done = _memvault(declares_1_0, "parity", "skips-stored-check", "-k", _NEWER_TEST)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "memvault parity skips-stored-check: PASS" in done.stdout
    assert "new requirements in 1.1 this provider does not meet yet: P33" in done.stdout
    assert f"NOT MET {_NEWER_TEST}" in done.stdout
    assert "declares contract 1.0" in done.stdout


def test_strict_fails_a_newer_line_a_provider_misses(declares_1_0: Path) -> None:
    done = _memvault(declares_1_0, "parity", "skips-stored-check", "--strict", "-k", _NEWER_TEST)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"FAILED {_NEWER_TEST}" in done.stdout
    assert "NOT MET" not in done.stdout


def test_a_line_of_the_declared_version_still_fails(declares_1_0: Path) -> None:
    """The declared version never loosens the lines it covers: a 1.0 provider missing P15 fails."""
    done = _memvault(declares_1_0, "parity", "ignores-limit", "-k", _OLDER_TEST)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"FAILED {_OLDER_TEST}" in done.stdout


def test_declaring_the_newer_version_makes_the_line_a_failure(tmp_path: Path) -> None:
    site = _install(tmp_path, "1.1")
    done = _memvault(site, "parity", "skips-stored-check", "-k", _NEWER_TEST)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"FAILED {_NEWER_TEST}" in done.stdout


def test_providers_shows_each_provider_s_contract_version(tmp_path: Path) -> None:
    site = _install(tmp_path, None)
    done = _memvault(site, "providers")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("ignores-limit "))
    assert row.split()[3] == "1.0", "no contract_version: the first version"
    memory = next(line for line in done.stdout.splitlines() if line.startswith("memory "))
    assert memory.split()[3] == memvault.CONTRACT_VERSION


@pytest.mark.parametrize("bad", ["2.0", "1", 1.2, "v1.2"])
def test_an_unknown_contract_version_fails_the_plugin_saying_which_exist(tmp_path: Path, bad: object) -> None:
    site = _install(tmp_path, bad)  # type: ignore[arg-type]
    done = _memvault(site, "providers")
    assert "ignores-limit" not in done.stdout
    assert "plugin versioned-plugin (distribution memvault-versioned-plugin) not usable" in done.stderr
    assert "contract_version" in done.stderr
    assert ("newer than this memvault knows" in done.stderr) if bad == "2.0" else ("1.0, 1.1" in done.stderr)


def test_our_providers_declare_the_newest_contract_version() -> None:
    ours = {"memory", "sqlite", "local-disk", "postgres", "http-remote", "template-provider"}
    registry = get_registry()
    found = {name: registry.get(name).contract_version for name in ours & set(registry.names())}
    assert "memory" in found
    assert set(found.values()) == {memvault.CONTRACT_VERSION}


# -- the contract's versions, in the docs and in the suite -------------------------------------


@source_checkout
def test_every_contract_line_carries_a_known_version() -> None:
    page = CONTRACT.read_text(encoding="utf-8")
    numbered = _NUMBERED.findall(page)
    tagged = dict(_TAGGED.findall(page))
    assert [n for n in numbered if n not in tagged] == [], (
        "contract lines without a version tag: write `- P99 [v"
        + memvault.CONTRACT_VERSION
        + "] ...` (memvault.CONTRACT_VERSION) for a line added or tightened now"
    )
    assert {v for v in tagged.values()} <= set(CONTRACT_VERSIONS)


@source_checkout
def test_the_suite_knows_every_older_line_s_version() -> None:
    """LINE_VERSIONS is contract.md's tags for every line older than the newest version."""
    tagged = dict(_TAGGED.findall(CONTRACT.read_text(encoding="utf-8")))
    newest = memvault.CONTRACT_VERSION
    wrong = {line: (tag, line_version(line)) for line, tag in tagged.items() if line_version(line) != tag}
    assert wrong == {}, (
        "contract.md's tag differs from memvault_parity.versions.LINE_VERSIONS: when the newest version "
        f"({newest}) becomes an older one, list its lines there"
    )
    assert set(LINE_VERSIONS) <= set(tagged), "LINE_VERSIONS names lines contract.md does not have"


@source_checkout
def test_the_versioning_page_says_what_each_version_added() -> None:
    page = (ROOT / "docs" / "plugin-authors" / "versioning.md").read_text(encoding="utf-8")
    for version in CONTRACT_VERSIONS:
        assert re.search(rf"^\| {re.escape(version)} \|", page, re.MULTILINE), version


def test_every_standard_test_has_a_version_no_newer_than_the_newest() -> None:
    newest = contract_version_key(memvault.CONTRACT_VERSION)
    for name in dir(ProviderSuite):
        if name.startswith("test_"):
            func = getattr(ProviderSuite, name)
            assert contract_version_key(version_of_test(func)) <= newest, name
            assert all(re.fullmatch(r"[PLD]\d+", line) for line in cited_lines(func))
