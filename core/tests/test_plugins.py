"""Plugin discovery and registration: contract D1-D3 and the house rules for registries."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import importlib_metadata
import pytest

import memvault
from memvault import registry as plugins_module
from memvault.contract.errors import InvalidRequest, PluginError, ProviderNotFound
from memvault.registry import Registry, coerce_settings

_PROVIDER = """
import memvault
from memvault.providers.memory import MemoryProvider


class {cls}(MemoryProvider):
    def __init__(self, path: str = "x", size: int = 1, fast: bool = False, ratio: float | None = None) -> None:
        super().__init__()
        self.settings = (path, size, fast, ratio)


@memvault.hookimpl
def memvault_register_providers(register):
    register("{name}", {cls}, capabilities={caps!r}, description="test provider")
"""


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Iterator[Path]:
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for mod in [m for m in sys.modules if m.startswith("fakeplug_")]:
        del sys.modules[mod]


def write_plugin(folder: Path, module: str, body: str) -> importlib_metadata.EntryPoint:
    (folder / f"{module}.py").write_text(textwrap.dedent(body))
    return importlib_metadata.EntryPoint(name=module.removeprefix("fakeplug_"), value=module, group="memvault")


def provider_plugin(folder: Path, module: str, name: str, caps: tuple[str, ...] = ()) -> importlib_metadata.EntryPoint:
    return write_plugin(folder, module, _PROVIDER.format(cls="P", name=name, caps=set(caps) or set()))


def test_d1_entry_point_plugin_appears_with_its_provider(plugin_dir: Path) -> None:
    ep = provider_plugin(plugin_dir, "fakeplug_one", "one", ("durable",))
    registry = Registry(entry_points=[ep])
    assert registry.names() == ["memory", "one"]
    info = registry.get("one")
    assert (info.plugin, info.capabilities, info.description) == ("one", frozenset({"durable"}), "test provider")


def test_d1_core_registers_memory_without_entry_points() -> None:
    registry = Registry(entry_points=[], load=[])
    assert registry.get("memory").distribution == "memvault"


def test_d2_broken_import_is_reported_and_others_still_load(plugin_dir: Path) -> None:
    good = provider_plugin(plugin_dir, "fakeplug_good", "good")
    bad = write_plugin(plugin_dir, "fakeplug_bad", "raise ImportError('needs libfoo')\n")
    registry = Registry(entry_points=[bad, good])
    assert "good" in registry.names()
    [failure] = registry.failures
    assert failure.name == "bad"
    assert "needs libfoo" in failure.cause


def test_d2_plugin_with_misspelt_hook_is_reported(plugin_dir: Path) -> None:
    ep = write_plugin(
        plugin_dir,
        "fakeplug_typo",
        """
        import memvault
        @memvault.hookimpl
        def memvault_register_provider(register):
            pass
        """,
    )
    registry = Registry(entry_points=[ep])
    [failure] = registry.failures
    assert failure.name == "typo"
    assert "memvault_register_provider" in failure.cause


def test_d2_register_hook_that_raises_is_reported(plugin_dir: Path) -> None:
    ep = write_plugin(
        plugin_dir,
        "fakeplug_raises",
        """
        import memvault
        @memvault.hookimpl
        def memvault_register_providers(register):
            raise RuntimeError('config missing')
        """,
    )
    registry = Registry(entry_points=[ep])
    assert "config missing" in registry.failures[0].cause
    assert registry.names() == ["memory"]


def test_d2_allow_list_loads_only_named_plugins(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    eps = [provider_plugin(plugin_dir, "fakeplug_a", "a"), provider_plugin(plugin_dir, "fakeplug_b", "b")]
    monkeypatch.setenv("MEMVAULT_LOAD_PLUGINS", "b")
    assert Registry(entry_points=eps).names() == ["b", "memory"]
    monkeypatch.setenv("MEMVAULT_LOAD_PLUGINS", "")
    assert Registry(entry_points=eps).names() == ["memory"]


def test_d2_deny_list_skips_named_plugins(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    eps = [provider_plugin(plugin_dir, "fakeplug_c", "c"), provider_plugin(plugin_dir, "fakeplug_d", "d")]
    monkeypatch.setenv("MEMVAULT_DISABLE_PLUGINS", "c, x")
    assert Registry(entry_points=eps).names() == ["d", "memory"]


def test_duplicate_provider_name_is_an_error_naming_both_plugins(plugin_dir: Path) -> None:
    eps = [provider_plugin(plugin_dir, "fakeplug_e", "same"), provider_plugin(plugin_dir, "fakeplug_f", "same")]
    registry = Registry(entry_points=eps)
    assert "same" not in registry.names()
    with pytest.raises(PluginError, match="'e' and 'f'"):
        registry.get("same")


def test_duplicate_of_a_builtin_name_is_an_error(plugin_dir: Path) -> None:
    registry = Registry(entry_points=[provider_plugin(plugin_dir, "fakeplug_g", "memory")])
    with pytest.raises(PluginError, match="'memvault.providers.memory' and 'g'"):
        registry.get("memory")


def test_invalid_provider_names_and_capabilities_are_refused(plugin_dir: Path) -> None:
    bad_name = provider_plugin(plugin_dir, "fakeplug_h", "Bad Name")
    bad_caps = provider_plugin(plugin_dir, "fakeplug_i", "i", ("teleport",))
    registry = Registry(entry_points=[bad_name, bad_caps])
    causes = " ".join(f.cause for f in registry.failures)
    assert "'Bad Name'" in causes
    assert "teleport" in causes


def test_d3_unknown_provider_lists_the_installed_ones() -> None:
    with pytest.raises(ProviderNotFound) as info:
        memvault.open("nope")
    assert "installed providers:" in str(info.value)
    assert "memory" in info.value.installed


def test_unknown_setting_is_an_error_naming_it(plugin_dir: Path) -> None:
    registry = Registry(entry_points=[provider_plugin(plugin_dir, "fakeplug_j", "j")])
    with pytest.raises(
        InvalidRequest, match="does not take setting 'colour'; its settings are: fast, path, ratio, size"
    ):
        coerce_settings(registry.get("j"), {"colour": "red"})


def test_memory_provider_takes_no_settings() -> None:
    with pytest.raises(InvalidRequest, match="does not take setting 'path'"):
        memvault.open("memory", path="x.db")


def test_string_settings_are_converted_by_annotation(plugin_dir: Path) -> None:
    registry = Registry(entry_points=[provider_plugin(plugin_dir, "fakeplug_k", "k")])
    info = registry.get("k")
    assert coerce_settings(info, {"size": "3", "fast": "yes", "ratio": "0.5", "path": "p"}) == {
        "size": 3,
        "fast": True,
        "ratio": 0.5,
        "path": "p",
    }
    with pytest.raises(InvalidRequest, match="size='many'"):
        coerce_settings(info, {"size": "many"})
    with pytest.raises(InvalidRequest, match="fast='perhaps'"):
        coerce_settings(info, {"fast": "perhaps"})


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", float("nan"), float("inf")])
def test_a_float_setting_must_be_finite(plugin_dir: Path, value: object) -> None:
    """From the CLI (a string) or TOML and Python (a float): nan passes every sign check a provider
    makes and inf overflows a timeout, so neither reaches the provider."""
    registry = Registry(entry_points=[provider_plugin(plugin_dir, "fakeplug_f", "f")])
    with pytest.raises(InvalidRequest, match="ratio=.*not a .*finite") as info:
        coerce_settings(registry.get("f"), {"ratio": value})
    assert info.value.field == "ratio"
    assert coerce_settings(registry.get("f"), {"ratio": 1e300})["ratio"] == 1e300


def test_unknown_scanner_name_is_an_error() -> None:
    with pytest.raises(PluginError, match="no scanner named 'nosuch'"):
        memvault.open("memory", scanner="nosuch")


def test_scanner_off_opens_without_scanner() -> None:
    with memvault.open("memory", scanner="off") as vault:
        assert len(vault.plugin_manager.get_plugins()) == 2  # the provider and the default lifecycle


def test_builtin_scanner_is_the_default_for_local_providers() -> None:
    from memvault.scanner.plugin import BuiltinScanner

    with memvault.open("memory") as vault:
        assert any(isinstance(p, BuiltinScanner) for p in vault.plugin_manager.get_plugins())


def test_providers_that_scan_upstream_default_to_no_client_scanner(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memvault import registry as plugins
    from memvault.scanner.plugin import BuiltinScanner

    registry = Registry(entry_points=[provider_plugin(plugin_dir, "fakeplug_r", "far", ("remote", "scans_upstream"))])
    monkeypatch.setattr(plugins, "_registry", registry)
    with memvault.open("far") as vault:
        assert not any(isinstance(p, BuiltinScanner) for p in vault.plugin_manager.get_plugins())
    with memvault.open("far", scanner="builtin") as vault:
        assert any(isinstance(p, BuiltinScanner) for p in vault.plugin_manager.get_plugins())


def test_a_remote_database_keeps_the_client_scanner_and_gets_the_remote_health_deadline(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``remote`` alone (a database across the network) means the 1 s health deadline, not "someone
    else scans": such a provider stores whatever it is given, so the vault keeps its scanner."""
    from memvault import registry as plugins
    from memvault.scanner.plugin import BuiltinScanner

    registry = Registry(entry_points=[provider_plugin(plugin_dir, "fakeplug_db", "fardb", ("remote",))])
    monkeypatch.setattr(plugins, "_registry", registry)
    with memvault.open("fardb") as vault:
        assert any(isinstance(p, BuiltinScanner) for p in vault.plugin_manager.get_plugins())
        assert vault.health_timeout == 1.0


_FACTORY_TAKING = """
import memvault
from memvault.providers.memory import MemoryProvider


def make(*, {param}: str = "", **rest):
    '''A factory function.'''
    return MemoryProvider()


@memvault.hookimpl
def memvault_register_providers(register):
    register("{name}", make)
"""


@pytest.mark.parametrize("reserved", ["config", "health_timeout", "plugins", "scan", "scanner"])
def test_a_factory_taking_a_reserved_name_is_refused_at_registration(plugin_dir: Path, reserved: str) -> None:
    ep = write_plugin(plugin_dir, f"fakeplug_res_{reserved}", _FACTORY_TAKING.format(param=reserved, name="res"))
    registry = Registry(entry_points=[ep])
    assert "res" not in registry.names()
    [failure] = registry.failures
    assert f"takes setting {reserved!r}" in failure.cause
    assert "rename that setting" in failure.cause


_REQUIRED = """
import memvault
from memvault.providers.memory import MemoryProvider


def documented(bucket: str, region: str = "eu"):
    '''Open one.

    :param bucket: the bucket that holds
        every memory.
    :param region: where.
    '''
    return MemoryProvider()


def undocumented(url: str, port: int):
    return MemoryProvider()


@memvault.hookimpl
def memvault_register_providers(register):
    register("documented", documented)
    register("undocumented", undocumented)
"""


def test_missing_required_settings_are_named_with_meaning_and_how_to_pass_them(plugin_dir: Path) -> None:
    from memvault.registry import missing_settings

    registry = Registry(entry_points=[write_plugin(plugin_dir, "fakeplug_req", _REQUIRED)])
    error = missing_settings(registry.get("documented"), {})
    assert error is not None
    assert error.field == "bucket"
    assert "needs the setting 'bucket' (the bucket that holds every memory)" in str(error)
    assert "`-o bucket=VALUE`" in str(error)
    assert "`bucket = ...` under `[providers.documented]`" in str(error)
    assert "memvault.open('documented', bucket=...)" in str(error)
    assert missing_settings(registry.get("documented"), {"bucket": "b"}) is None
    both = missing_settings(registry.get("undocumented"), {})
    assert both is not None
    assert "needs the settings 'url' (a str), 'port' (an int)" in str(both)


_PROVIDER_AND_SCANNERS = """
import memvault
from memvault.providers.memory import MemoryProvider


class Scanner:
    pass


@memvault.hookimpl
def memvault_register_providers(register):
    register("halfway", MemoryProvider, description="registered before the scanners fail")


@memvault.hookimpl
def memvault_register_scanners(register):
    register("halfway-scan", Scanner)
    {failure}
"""


@pytest.mark.parametrize(
    "failure",
    ["raise RuntimeError('scanner config missing')", "register('builtin', Scanner)  # taken by the core"],
    ids=["raises", "name-taken"],
)
def test_failed_registration_withdraws_every_provider_and_scanner_of_the_plugin(plugin_dir: Path, failure: str) -> None:
    """All or nothing per plugin: the provider and the first scanner go, and it is a failure only."""
    ep = write_plugin(plugin_dir, "fakeplug_halfway", _PROVIDER_AND_SCANNERS.format(failure=failure))
    registry = Registry(entry_points=[ep, provider_plugin(plugin_dir, "fakeplug_fine", "fine")])
    assert [f.name for f in registry.failures] == ["halfway"]
    assert "halfway" not in [name for name, _, _ in registry.loaded]
    assert "fine" in [name for name, _, _ in registry.loaded]
    assert registry.names() == ["fine", "memory"]
    assert "halfway-scan" not in registry.scanners
    with pytest.raises(PluginError, match="no scanner named 'halfway-scan'"):
        registry.scanner("halfway-scan")
    assert registry.scanner("builtin")  # the core's scanner is untouched
    plugins = registry.plugin_manager.get_plugins()
    assert not any(getattr(p, "__name__", "") == "fakeplug_halfway" for p in plugins)


_VAULT_PLUGIN = """
import memvault


class Audit:
    seen = []

    @memvault.hookimpl(wrapper=True)
    def memvault_retain(self, request):
        Audit.seen.append(request.content)
        return (yield)


@memvault.hookimpl
def memvault_vault_plugins():
    return [Audit()]
"""


def test_memvault_vault_plugins_puts_a_plugins_wrapper_in_every_vault(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A third-party plugin reaches every vault (audit, metrics) through memvault_vault_plugins,
    the same hook the core's default lifecycle uses; each vault gets a fresh object."""
    from memvault import registry as plugins

    ep = write_plugin(plugin_dir, "fakeplug_audit", _VAULT_PLUGIN)
    monkeypatch.setattr(plugins, "_registry", Registry(entry_points=[ep]))
    with memvault.open("memory") as one, memvault.open("memory") as two:
        req = memvault.RetainRequest(workspace_id="w", agent_id="a", tier="AGENT", content="kept", mode="append")
        one.retain(req)
        two.retain(req)
        audits = [[p for p in v.plugin_manager.get_plugins() if type(p).__name__ == "Audit"] for v in (one, two)]
    assert [len(a) for a in audits] == [1, 1]
    assert audits[0][0] is not audits[1][0]
    assert type(audits[0][0]).seen == ["kept", "kept"]


def test_builtin_plugins_load_by_dotted_name_and_are_listed_as_loaded() -> None:
    registry = Registry(entry_points=[], load=[])
    loaded = [name for name, dist, _ in registry.loaded if dist == "memvault"]
    assert loaded == list(plugins_module.BUILTIN_PLUGINS)
    assert registry.failures == []


def test_memvault_trace_hooks_logs_every_hook_call(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MEMVAULT_TRACE_HOOKS", "1")
    caplog.set_level(logging.DEBUG, logger="memvault.hooks")
    with memvault.open("memory") as vault:
        vault.retain(memvault.RetainRequest(workspace_id="w", agent_id="a", tier="AGENT", content="x", mode="append"))
    calls = [r.getMessage() for r in caplog.records if r.name == "memvault.hooks"]
    assert any(m.startswith("call memvault_retain(") for m in calls), calls
    assert any(m.startswith("done memvault_retain -> RetainResult(") for m in calls), calls
    monkeypatch.delenv("MEMVAULT_TRACE_HOOKS")
    caplog.clear()
    with memvault.open("memory") as vault:
        vault.health()
    assert not [r for r in caplog.records if r.name == "memvault.hooks"]


@pytest.mark.parametrize("scanner", ["builtin", "off"])
def test_a_bad_scan_table_is_rejected_whichever_scanner_runs(scanner: str) -> None:
    """[scan] configures the builtin scanner; a typo in it fails at open even while the scanner is off."""
    with pytest.raises(InvalidRequest, match="unknown key"):
        memvault.open("memory", scanner=scanner, scan={"treshold": {}})
    with pytest.raises(InvalidRequest, match="pattern"):
        memvault.open("memory", scanner=scanner, scan={"allow": ["no_such_rule"]})


def test_the_scan_table_reaches_the_builtin_scanner() -> None:
    from memvault.scanner.plugin import BuiltinScanner

    with memvault.open("memory", scan={"thresholds": {"role_hijack": 2.0}}) as vault:
        [scanner] = [p for p in vault.plugin_manager.get_plugins() if isinstance(p, BuiltinScanner)]
        assert scanner.policy.thresholds["role_hijack"] == 2.0


@pytest.mark.parametrize(
    ("body", "cause"),
    [
        ("raise RuntimeError('no license')", "memvault_vault_plugins raised RuntimeError: no license"),
        ("return object()", "returned object, not a list"),
        ("return [Typo()]", "does not fit the hooks"),
    ],
)
def test_d2_a_broken_vault_plugins_hook_is_reported_at_load_and_breaks_no_vault(
    plugin_dir: Path, monkeypatch: pytest.MonkeyPatch, body: str, cause: str
) -> None:
    from memvault import registry as plugins

    source = (
        "import memvault\n\n"
        "class Typo:\n"
        "    @memvault.hookimpl\n"
        "    def memvault_retian(self, request):\n"
        "        return None\n\n"
        "@memvault.hookimpl\n"
        "def memvault_register_providers(register):\n"
        "    register('withdrawn', lambda: None)\n\n"
        "@memvault.hookimpl\n"
        f"def memvault_vault_plugins():\n    {body}\n"
    )
    ep = write_plugin(plugin_dir, "fakeplug_vp", source)
    registry = Registry(entry_points=[ep])
    [failure] = registry.failures
    assert failure.name == "vp"
    assert cause in failure.cause
    assert "withdrawn" not in registry.names()  # all or nothing (D2)
    monkeypatch.setattr(plugins, "_registry", registry)
    with memvault.open("memory") as vault:
        vault.retain(memvault.RetainRequest(workspace_id="w", agent_id="a", tier="AGENT", content="x", mode="append"))
