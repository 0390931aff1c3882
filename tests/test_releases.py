"""Releases (issue #34): one version for every distribution, dependency floors that agree, a
changelog entry for every user-visible change, and the versions ``memvault --version`` names."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _pyprojects() -> list[Path]:
    """The distributions of this repository, released together (the frozen plugin is a third
    party's). From git when it is there, so a distribution still being written joins the
    check when it is committed."""
    candidates = [ROOT / "core" / "pyproject.toml", ROOT / "parity_suite" / "pyproject.toml"]
    candidates += sorted(ROOT.glob("plugins/*/pyproject.toml"))
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "core", "parity_suite", "plugins"],
        capture_output=True,
        text=True,
        check=False,
    )
    if tracked.returncode == 0 and tracked.stdout:
        known = {ROOT / line for line in tracked.stdout.splitlines()}
        candidates = [p for p in candidates if p in known]
    return [p for p in candidates if p.is_file()]


PYPROJECTS = _pyprojects()
_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*(?P<spec>[^;]*)")


def _changelog_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("changelog_tool", ROOT / ".ci" / "changelog.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _projects() -> dict[str, dict[str, object]]:
    found = {}
    for path in PYPROJECTS:
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        found[project["name"]] = project
    return found


def _version() -> str:
    return str(_projects()["memvault"]["version"])


def test_every_distribution_has_the_core_s_version() -> None:
    versions = {name: project["version"] for name, project in _projects().items()}
    assert len(versions) >= 10
    assert {name: v for name, v in versions.items() if v != _version()} == {}, (
        "the distributions are released together with one version: bump them all"
    )
    assert re.fullmatch(r"\d+\.\d+\.\d+", _version())


def test_every_dependency_on_a_sibling_has_the_release_s_floor() -> None:
    """A plugin of release X needs the core of release X (and siblings of X): the floor is X."""
    ours = set(_projects())
    wrong = []
    for name, project in _projects().items():
        requirements = list(project.get("dependencies", []))  # type: ignore[call-overload]
        for extra in dict(project.get("optional-dependencies", {})).values():  # type: ignore[call-overload]
            requirements += list(extra)
        for requirement in requirements:
            match = _REQUIREMENT.match(requirement)
            assert match is not None, requirement
            if match.group("name") in ours and match.group("spec").strip() != f">={_version()}":
                wrong.append(f"{name}: {requirement}")
    assert wrong == [], f"give each dependency on a distribution of this repository the floor >={_version()}"


def test_every_changelog_fragment_is_well_formed() -> None:
    tool = _changelog_tool()
    assert tool.problems() == []


def test_the_check_catches_each_kind_of_bad_fragment(tmp_path: Path) -> None:
    tool = _changelog_tool()
    (tmp_path / "good-one.fixed.md").write_text("Fixed a thing (#1).\n")
    (tmp_path / "Bad_Name.fixed.md").write_text("x (#1)")
    (tmp_path / "wrong-type.improved.md").write_text("x (#1)")
    (tmp_path / "empty.added.md").write_text("  \n")
    (tmp_path / "heading.added.md").write_text("# Title\nx (#1)\n")
    (tmp_path / "no-issue.changed.md").write_text("Something changed.\n")
    found = "\n".join(tool.problems(tmp_path))
    for name in ("Bad_Name.fixed.md", "wrong-type.improved.md", "empty.added.md", "heading.added.md", "no-issue"):
        assert name in found
    assert "good-one" not in found


def test_an_unreleased_version_has_fragments_and_is_not_yet_a_released_section() -> None:
    """While the version is unreleased its changes wait in changelog.d/; once released, the
    section is in CHANGELOG.md and the next change bumps the version."""
    tool = _changelog_tool()
    released = tool.released()
    assert released, "CHANGELOG.md has no released section"
    if _version() in released:
        assert tool.fragments() == [], (
            f"{_version()} is released, yet changelog.d/ holds fragments: bump the version of every distribution"
        )
    else:
        assert tool.fragments(), "an unreleased version with no changelog fragment: add one per user-visible change"
        newest = tuple(int(p) for p in released[0].split("."))
        assert tuple(int(p) for p in _version().split(".")) > newest


def test_a_release_renders_every_fragment_under_its_type(tmp_path: Path) -> None:
    tool = _changelog_tool()
    (tmp_path / "b-thing.fixed.md").write_text("Fixed\nover two lines (#2).\n")
    (tmp_path / "a-thing.added.md").write_text("Added a thing (#1).\n")
    (tmp_path / "old-path.deprecated.md").write_text("Deprecated a path (#3).\n")
    section = tool.render("9.9.0", "2030-01-01", tmp_path)
    assert section.splitlines()[0] == "## 9.9.0 - 2030-01-01"
    assert section.index("### Deprecated") < section.index("### Added") < section.index("### Fixed")
    assert "- Fixed over two lines (#2)." in section
    assert tool.RELEASED.search(section)


@pytest.mark.parametrize("name", ["CHANGELOG.md"])
def test_the_changelog_names_the_contract_version_of_each_release(name: str) -> None:
    import memvault

    text = (ROOT / name).read_text(encoding="utf-8")
    assert "## 0.1.0 - 2026-11-30" in text
    assert "(contract 1.0)" in text
    assert f"(contract {memvault.CONTRACT_VERSION})" in text
