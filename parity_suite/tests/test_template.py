"""The plugin template works as shipped: copied, installed into a fresh virtualenv, it passes
`memvault parity template-provider` (what a third-party author does first).

Slow-ish (a real venv and three installs, ~20-40 s); bounded to 90 s in all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
_TEMPLATE = _REPO / "plugins" / "_template"
_BUDGET = 90.0


def _run(
    args: list[str], deadline: float, env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        pytest.fail("template check ran out of its time budget")
    return subprocess.run(args, capture_output=True, text=True, timeout=remaining, check=False, env=env, cwd=cwd)


def _python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.pop("MEMVAULT_LOAD_PLUGINS", None)
    env.pop("MEMVAULT_DISABLE_PLUGINS", None)
    return env


@pytest.mark.skipif(not _TEMPLATE.is_dir(), reason="runs from a source checkout only")
def test_copied_template_installs_and_passes_memvault_parity(tmp_path: Path) -> None:
    """Copy plugins/_template, install it with ./core and ./parity_suite in a new venv,
    and `memvault parity template-provider` exits 0 with a PASS summary."""
    deadline = time.monotonic() + _BUDGET
    plugin = tmp_path / "my-plugin"
    shutil.copytree(_TEMPLATE, plugin, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache"))
    env = _clean_env()
    sources = [str(_REPO / "core"), str(_REPO / "parity_suite"), str(plugin)]
    venv, problems = tmp_path / "venv", "uv is not on PATH"
    uv = shutil.which("uv")
    if uv:  # fast path; falls back to pip when uv cannot reach an index from here
        made = _run([uv, "venv", "-q", "--python", sys.executable, str(venv)], deadline, env=env)
        problems = made.stderr if made.returncode else ""
        if not problems:
            command = [uv, "pip", "install", "-q", "--python", str(_python(venv)), *sources]
            installed = _run(command, deadline, env=env)
            problems = installed.stderr if installed.returncode else ""
    if problems:
        venv = tmp_path / "venv-pip"
        made = _run([sys.executable, "-m", "venv", str(venv)], deadline, env=env)
        assert made.returncode == 0, made.stderr
        installed = _run([str(_python(venv)), "-m", "pip", "install", "-q", *sources], deadline, env=env)
        assert installed.returncode == 0, problems + installed.stdout[-3000:] + installed.stderr[-3000:]
    memvault_cli = venv / ("Scripts/memvault.exe" if os.name == "nt" else "bin/memvault")
    listed = _run([str(memvault_cli), "providers"], deadline, env=env, cwd=tmp_path)
    assert re.search(r"^template-provider\s+memvault-template-provider\s+\d+\.\d+\.\d+", listed.stdout, re.MULTILINE), (
        listed.stdout + listed.stderr
    )
    ran = _run([str(memvault_cli), "parity", "template-provider"], deadline, env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert re.search(r"memvault parity template-provider: PASS: \d+ passed, 0 failed, \d+ skipped", ran.stdout)
