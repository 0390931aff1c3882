"""README.md's two commands, read from README.md itself so they cannot drift.

The first command runs as written in a fresh copy of the repository (see the
``readme_service`` fixture): it creates `.venv`, installs the distributions
there, starts the service; a verb then goes to the service through the
`http-remote` provider, from the venv the command made.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ReadmeService, clean_env
from readme import ROOT, install_command, repository_files, suite_command

CHECK = ROOT / ".ci" / "check_pythons.py"


def distributions() -> list[str]:
    """Every distribution folder of the repository (one with a pyproject.toml of its own)."""
    found = []
    for path in repository_files():
        rel = path.relative_to(ROOT)
        # A distribution under a tests folder is a fixture (the plugin frozen at memvault 0.1.0), not one to install.
        if rel.name != "pyproject.toml" or len(rel.parts) < 2:
            continue
        if not rel.parts[-2].startswith("_") and "tests" not in rel.parts:
            found.append("./" + rel.parent.as_posix())
    return sorted(found)


def test_first_command_creates_a_venv_and_uses_only_it() -> None:
    command = install_command()
    assert command.startswith("python3 -m venv .venv && .venv/bin/pip install ")
    assert command.endswith(" && .venv/bin/memvault serve")
    assert " python " not in f" {command} "
    assert " pip " not in f" {command} "


def test_first_command_installs_every_distribution_of_the_repository() -> None:
    installed = install_command().split(".venv/bin/pip install ")[1].split(" && ")[0].split()
    assert sorted(installed) == distributions()


def test_first_command_serves_and_a_verb_reaches_it_through_http_remote(readme_service: ReadmeService) -> None:
    url = readme_service.url
    assert url.startswith("http://127.0.0.1:")
    memvault = readme_service.bin("memvault")
    common = [memvault, "--provider", "http-remote", "-o", f"url={url}"]
    part = ["--workspace", "readme", "--agent", "a1"]
    env = clean_env()
    retain = subprocess.run(
        [*common, "retain", *part, "--tier", "pins", "--mode", "append", "Prefers metric units."],
        cwd=readme_service.checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert retain.returncode == 0, retain.stderr
    recall = subprocess.run(
        [*common, "recall", "--json", *part, "metric units"],
        cwd=readme_service.checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert recall.returncode == 0, recall.stderr
    assert json.loads(recall.stdout)["hits"][0]["snippet"].startswith("Prefers metric units.")
    # The service stores on the README's SQLite default, in the clone's working directory.
    assert (readme_service.checkout / "memvault.db").exists()


def test_ci_runs_exactly_the_readme_suite_command() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert suite_command() in lines


def test_test_command_checks_interpreters_before_tox() -> None:
    command = suite_command()
    assert command.startswith("python3 -m venv .venv && ")
    assert command.index(".ci/check_pythons.py") < command.index("tox run-parallel")


def _path_without(tmp_path: Path, missing: str) -> str:
    """A PATH holding links to every python3.X this machine has, except ``missing``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for minor in range(10, 14):
        name = f"python3.{minor}"
        found = shutil.which(name)
        if name == missing or not found:
            continue
        # Link the real interpreter: a shim (pyenv) would need the rest of PATH.
        real = subprocess.run(
            [found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, timeout=60, check=True
        ).stdout.strip()
        (bin_dir / name).symlink_to(real)
    return str(bin_dir)


def test_missing_interpreter_is_named_with_the_subset_that_can_run(tmp_path: Path) -> None:
    env = {**clean_env(), "PATH": _path_without(tmp_path, "python3.10")}
    proc = subprocess.run(
        [sys.executable, str(CHECK)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 1
    assert "not found on PATH: python3.10" in proc.stderr
    subset = proc.stderr.split(" -e ")[1].split()[0].split(",")
    assert "py311-core" in subset
    assert "parity-sqlite" in subset
    assert not [env for env in subset if "py310" in env]
    assert {"py310-core", "py310-parity-sqlite"}.isdisjoint(subset)


def test_every_interpreter_present_passes_the_check(tmp_path: Path) -> None:
    if not all(shutil.which(f"python3.{m}") for m in range(10, 14)):
        pytest.skip("this machine lacks one of python3.10-3.13 (the check itself is tested above)")
    proc = subprocess.run(
        [sys.executable, str(CHECK)], env=clean_env(), capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "python3.10, python3.11, python3.12, python3.13" in proc.stdout


def test_tox_never_downloads_an_interpreter() -> None:
    text = (ROOT / "tox.ini").read_text()
    assert "skip_missing_interpreters = false" in text
    assert "uv_python_preference = only-system" in text
    assert os.environ.get("UV_PYTHON_DOWNLOADS", "never") == "never"


def test_getting_started_shows_the_same_two_commands() -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert f"$ {install_command()}\n" in page
    assert f"$ {suite_command()}\n" in page
