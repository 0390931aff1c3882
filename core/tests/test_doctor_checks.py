"""``memvault doctor`` runs a provider's own read-only checks of its store (``checks=`` at registration)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import importlib_metadata
import pytest

from memvault import DoctorCheck
from memvault import registry as registry_module
from memvault.doctor import run_checks
from memvault.registry import Registry

_PLUGIN = """
import memvault
from memvault.providers.memory import MemoryProvider


class P(MemoryProvider):
    def __init__(self, path: str = "") -> None:
        super().__init__()


def good(settings):
    yield memvault.DoctorCheck("schema", "warn", f"store at {{settings.get('path', '-')}}: version 1 of 2", "migrate")


def broken(settings):
    raise RuntimeError("the checker fell over")


def wrong(settings):
    return ["not a check"]


@memvault.hookimpl
def memvault_register_providers(register):
    register("{name}", P, checks={checks})
"""


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for mod in [m for m in sys.modules if m.startswith("fakedoc_")]:
        del sys.modules[mod]


def _install(folder: Path, monkeypatch: pytest.MonkeyPatch, name: str, checks: str) -> Registry:
    """A registry holding one test plugin, made the process-wide one for this test."""
    module = f"fakedoc_{name}"
    (folder / f"{module}.py").write_text(textwrap.dedent(_PLUGIN.format(name=name, checks=checks)))
    ep = importlib_metadata.EntryPoint(name=name, value=module, group="memvault")
    registry = Registry(entry_points=[ep], load=[name])
    monkeypatch.setattr(registry_module, "_registry", registry)
    return registry


def _store_checks(name: str, options: dict[str, str] | None = None) -> list[DoctorCheck]:
    checks = run_checks(provider=name, options=options)
    start = next(i for i, c in enumerate(checks) if c.name == "config")
    return checks[start + 1 :]


def test_the_configured_providers_checks_run_with_its_settings(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(plugin_dir, monkeypatch, "docgood", "good")
    found = _store_checks("docgood", {"path": "the-store"})
    assert DoctorCheck("schema", "warn", "store at the-store: version 1 of 2", "migrate") in found
    # The doctor goes on: the store is opened and the disk looked at after the provider's checks.
    names = [c.name for c in found]
    assert names.index("schema") < names.index("store (docgood)") < names.index("disk")


def test_only_the_configured_providers_checks_run(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(plugin_dir, monkeypatch, "docgood", "good")
    assert all(c.name != "schema" for c in run_checks(provider="memory"))


@pytest.mark.parametrize("checks", ["broken", "wrong"])
def test_checks_that_crash_or_return_junk_are_a_failure_naming_the_plugin_not_a_crash(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, checks: str
) -> None:
    _install(plugin_dir, monkeypatch, "docbad", checks)
    found = [c for c in _store_checks("docbad") if c.status == "fail"]
    assert len(found) == 1
    assert found[0].name == "store (docbad)"
    assert "the provider's own checks" in found[0].detail
    assert ("the checker fell over" if checks == "broken" else "'not a check'") in found[0].detail


def test_checks_that_are_not_callable_are_refused_at_registration(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = _install(plugin_dir, monkeypatch, "docjunk", "42")
    assert "docjunk" not in registry.names()
    assert any("checks=42" in f.cause and "DoctorCheck" in f.cause for f in registry.failures)


def _scanner_checks(tmp_path: Path, config: str) -> list[DoctorCheck]:
    path = tmp_path / "memvault.toml"
    path.write_text(config, encoding="utf-8")
    return [c for c in run_checks(str(path), provider="memory") if c.name.startswith("scanner")]


def test_the_configured_scanner_builds_from_its_table_or_the_doctor_says_why(tmp_path: Path) -> None:
    assert _scanner_checks(tmp_path, 'provider = "memory"\n') == []  # the default scanner: nothing to check
    [ok] = _scanner_checks(tmp_path, 'provider = "memory"\nscanner = "builtin"\n[scan]\nallow = ["url_placeholder"]\n')
    assert (ok.name, ok.status, ok.detail) == ("scanner (builtin)", "ok", "builds from [scan]")
    [bad] = _scanner_checks(tmp_path, 'provider = "memory"\nscanner = "builtin"\n[scan]\nallow = ["no_such_rule"]\n')
    assert bad.status == "fail"
    assert "no_such_rule" in bad.detail
    assert "fix [scan]" in bad.fix
    [missing] = _scanner_checks(tmp_path, 'provider = "memory"\nscanner = "acme-nothing"\n')
    assert missing.status == "fail"
    assert "no scanner named 'acme-nothing'" in missing.detail
