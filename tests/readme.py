"""Helpers shared by the README and docs tests: the README's commands, read from README.md."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_CONSOLE = re.compile(r"^```console\n(.*?)^```", re.M | re.S)


def readme_commands() -> list[str]:
    """The `$ ` lines of the console blocks under README's "On a fresh machine"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## On a fresh machine") :]
    section = section[: section.index("\n## ", 1)]
    return [line[2:] for block in _CONSOLE.findall(section) for line in block.splitlines() if line.startswith("$ ")]


def install_command() -> str:
    """README's first command: create a venv, install the distributions, serve."""
    return readme_commands()[0]


def suite_command() -> str:
    """README's second command: the whole test suite."""
    return readme_commands()[1]


def repository_files() -> list[Path]:
    """Every file of the repository as a fresh clone would hold it (tracked, plus new unignored files)."""
    if shutil.which("git") and (ROOT / ".git").exists():
        proc = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        names = [n for n in proc.stdout.decode().split("\0") if n]
        return [ROOT / n for n in names if (ROOT / n).is_file()]
    skip = {".git", ".tox", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "site"}
    return [p for p in ROOT.rglob("*") if p.is_file() and not skip & set(p.relative_to(ROOT).parts)]


def copy_repository(target: Path) -> Path:
    """A copy of the repository's files in ``target`` (what a user has after `git clone`)."""
    for path in repository_files():
        dest = target / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    return target
