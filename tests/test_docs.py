"""Every code sample in README.md and docs/ runs: ```python blocks are executed, ```console
blocks' `$ memvault ...` lines are run and their shown output checked.

Lines that install, start a long-running server or run the test matrix are
not executed here (they are what CI itself does); everything else is.
"""

from __future__ import annotations

import os
import re
import runpy
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Generated signature listings, not samples.
NOT_SAMPLES = {"plugin-authors/hooks.md"}
_FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.M | re.S)
_NOT_RUN = ("pip install", "memvault serve", "tox ", "git clone", "cd ")
#: ``<!-- needs: module, ... -->`` on the line before a fence: the sample runs only where those
#: modules are installed (a plugin's or a framework's page); the env that installs them runs it.
_NEEDS = re.compile(r"<!--\s*needs:\s*([\w., ]+?)\s*-->\s*\n$")
NEEDS: dict[tuple[str, int], list[str]] = {}


def _blocks(kind: str) -> list[tuple[str, int, str]]:
    found = []
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        rel = page.relative_to(DOCS).as_posix() if page.is_relative_to(DOCS) else page.name
        if rel in NOT_SAMPLES:
            continue
        source = page.read_text(encoding="utf-8")
        for match in _FENCE.finditer(source):
            if match.group(1) == kind:
                line = source[: match.start()].count("\n") + 1
                needs = _NEEDS.search(source, max(0, match.start() - 200), match.start())
                if needs:
                    NEEDS[(rel, line)] = [m.strip() for m in needs.group(1).split(",") if m.strip()]
                found.append((rel, line, textwrap.dedent(match.group(2))))
    return found


def _id(block: tuple[str, int, str]) -> str:
    return f"{block[0]}:{block[1]}"


def _skip_unless_installed(block: tuple[str, int, str]) -> None:
    for module in NEEDS.get((block[0], block[1]), []):
        pytest.importorskip(module, reason=f"{block[0]}:{block[1]} needs {module}")


@pytest.mark.parametrize("block", _blocks("python"), ids=_id)
def test_python_sample_runs(block: tuple[str, int, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _skip_unless_installed(block)
    code = block[2]
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "sample.py"
    script.write_text(code)
    runpy.run_path(str(script), run_name="__main__")


@pytest.mark.parametrize("block", _blocks("console"), ids=_id)
def test_console_sample_runs(block: tuple[str, int, str], tmp_path: Path) -> None:
    _skip_unless_installed(block)
    page, line, code = block
    memvault_bin = Path(sys.executable).with_name("memvault")
    env = {**os.environ, "MEMVAULT_CONFIG": "", "PATH": f"{memvault_bin.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MEMVAULT_CONFIG")
    lines = code.splitlines()
    ran = 0
    for index, text in enumerate(lines):
        if not text.startswith("$ "):
            continue
        command = text[2:]
        if not command.startswith("memvault") or any(marker in command for marker in _NOT_RUN):
            continue
        expected = []
        for following in lines[index + 1 :]:
            if following.startswith("$ "):
                break
            expected.append(following)
        proc = subprocess.run(
            shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        output = proc.stdout + proc.stderr
        if expected and expected[0].startswith("error:"):
            assert proc.returncode != 0, f"{page}:{line}: `{command}` should fail"
        else:
            assert proc.returncode == 0, f"{page}:{line}: `{command}` exited {proc.returncode}:\n{output}"
        for shown in expected:
            assert shown.strip() in output, f"{page}:{line}: `{command}` did not print {shown!r}:\n{output}"
        ran += 1
    if ran == 0:
        pytest.skip(f"{page}:{line} holds only install/serve/test commands, run by CI itself")


def _config_blocks() -> list[tuple[str, int, str]]:
    """memvault.toml examples (pyproject snippets are not configs)."""
    # An MCP server's slots file (memvault-mcp tests its own samples) is not a memvault.toml.
    return [b for b in _blocks("toml") if "[project" not in b[2] and not b[2].startswith("# mcp.toml")]


@pytest.mark.parametrize("block", _config_blocks(), ids=_id)
def test_config_sample_is_a_valid_memvault_toml(block: tuple[str, int, str], tmp_path: Path) -> None:
    """Every memvault.toml in the docs loads, and its provider and server settings are accepted."""
    from memvault.config import load_config
    from memvault.plugins import coerce_settings, get_registry
    from memvault_http_remote.settings import ServerSettings

    path = tmp_path / "memvault.toml"
    path.write_text(block[2])
    config = load_config(path)
    for name, settings in config.providers.items():
        coerce_settings(get_registry().get(name), settings)
    ServerSettings.from_table(config.server)
