"""An installed plugin that fails to load is reported as installed and broken, once (issue #34, D2).

Each plugin here is a real distribution on disk (a module and its ``.dist-info`` entry
point), on the path of a ``memvault`` subprocess, found like any installed plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import importlib_metadata
import pytest

from memvault.contract.errors import ProviderNotFound
from memvault.registry import Registry

MEMVAULT = str(Path(sys.executable).with_name("memvault"))


def _install(site: Path, distribution: str, entry: str, module: str, body: str) -> dict[str, str]:
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(body))
    info = site / f"{distribution.replace('-', '_')}-2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 2.3\n")
    (info / "entry_points.txt").write_text(f"[memvault]\n{entry} = {module}\n")
    return {"PYTHONPATH": str(site)}


def _memvault(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    return subprocess.run(
        [MEMVAULT, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **env},
        check=False,
        stdin=subprocess.DEVNULL,
    )


BROKEN = """
    import memvault
    import libacme_native_driver_xyz  # a dependency the install lacks
"""


@pytest.fixture
def broken_env(tmp_path: Path) -> dict[str, str]:
    return _install(tmp_path / "site", "memvault-acme", "acme", "memvault_acme", BROKEN)


def test_asking_for_a_broken_plugin_s_provider_says_it_is_installed_but_fails_to_load(
    tmp_path: Path, broken_env: dict[str, str]
) -> None:
    done = _memvault(tmp_path, broken_env, "--provider", "acme", "recall", "--workspace", "w", "--agent", "a", "q")
    assert done.returncode != 0
    said = done.stdout + done.stderr
    assert "provider 'acme' is not usable" in said
    assert "(distribution memvault-acme) is installed but failed to load" in said
    assert "ModuleNotFoundError: No module named 'libacme_native_driver_xyz'" in said
    assert "memvault_acme.py:3" in said, "where the import failed"
    assert "pip install" not in said
    assert "no provider named" not in said


def test_providers_reports_the_broken_plugin_once(tmp_path: Path, broken_env: dict[str, str]) -> None:
    done = _memvault(tmp_path, broken_env, "providers")
    assert done.returncode == 0, done.stderr
    mentions = [line for line in done.stderr.splitlines() if "acme" in line]
    assert len(mentions) == 1, done.stderr
    assert "memvault-acme" in mentions[0]
    assert "No module named 'libacme_native_driver_xyz'" in mentions[0]
    listed = _memvault(tmp_path, broken_env, "providers", "--json")
    [problem] = [p for p in json.loads(listed.stdout)["problems"] if p["plugin"] == "acme"]
    assert problem["distribution"] == "memvault-acme"
    assert problem["error"].startswith("ModuleNotFoundError: No module named 'libacme_native_driver_xyz'")


def test_a_name_no_plugin_is_named_after_still_suggests_installing_and_names_the_broken_ones(
    tmp_path: Path, broken_env: dict[str, str]
) -> None:
    done = _memvault(tmp_path, broken_env, "--provider", "zzzzzz", "health")
    said = done.stdout + done.stderr
    assert "no provider named 'zzzzzz' is installed" in said
    assert "pip install memvault-zzzzzz" in said
    assert "failed to load, one of which may provide it: acme (memvault-acme)" in said


def test_the_registry_hands_the_failure_to_provider_not_found(tmp_path: Path) -> None:
    (tmp_path / "fakeplug_crashes.py").write_text("raise RuntimeError('config file missing')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        ep = importlib_metadata.EntryPoint(name="crashes", value="fakeplug_crashes", group="memvault")
        registry = Registry(entry_points=[ep])
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("fakeplug_crashes", None)
    with pytest.raises(ProviderNotFound) as caught:
        registry.get("crashes")
    assert "is installed but failed to load: RuntimeError: config file missing" in str(caught.value)
    assert caught.value.broken[0][0] == "crashes"
