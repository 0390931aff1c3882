"""The memvault command line over the core's `memory` provider."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import click
import importlib_metadata
import pytest
from click.testing import CliRunner

import memvault
from memvault.cli import main as cli_module
from memvault.registry import Registry

Invoke = Callable[..., click.testing.Result]


@pytest.fixture
def run() -> Invoke:
    runner = CliRunner()

    def invoke(*args: str, stdin: str | None = None) -> click.testing.Result:
        return runner.invoke(cli_module.cli, ["--provider", "memory", *args], input=stdin, catch_exceptions=False)

    return invoke


def test_providers_lists_memory_with_distribution_and_capabilities() -> None:
    result = CliRunner().invoke(cli_module.cli, ["providers"])
    assert result.exit_code == 0
    header, _rule, *rows = result.output.splitlines()
    assert header.split() == ["NAME", "DISTRIBUTION", "VERSION", "CONTRACT", "CAPABILITIES"]
    memory_row = next(r for r in rows if r.startswith("memory "))
    assert "memvault" in memory_row
    assert "cascade_forget" in memory_row
    assert memory_row.split()[3] == memvault.CONTRACT_VERSION


def test_version_names_the_package_and_the_contract_version() -> None:
    result = CliRunner().invoke(cli_module.cli, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == (
        f"memvault {importlib_metadata.version('memvault')} (contract {memvault.CONTRACT_VERSION})"
    )


def test_providers_json_and_health_column() -> None:
    result = CliRunner().invoke(cli_module.cli, ["providers", "--json", "--health"])
    payload = json.loads(result.output)
    memory = next(p for p in payload["providers"] if p["name"] == "memory")
    assert memory["health"] == "ok"
    assert memory["distribution"] == "memvault"


def test_retain_prints_the_label_and_size(run: Invoke) -> None:
    result = run("retain", "--workspace", "w", "--agent", "a", "--tier", "pins", "--mode", "append", "hello")
    assert result.exit_code == 0
    assert result.output.strip() == "stored pins.md (6 bytes)"  # with the newline the CLI adds


def test_retain_reads_standard_input(run: Invoke) -> None:
    result = run(
        "retain", "--workspace", "w", "--agent", "a", "--tier", "pins", "--mode", "append", "--json", stdin="from stdin"
    )
    printed = json.loads(result.output)
    assert printed.pop("idempotency_key").startswith("mv-")  # the memory provider records keys (P44)
    assert printed == {"id": "pins.md", "bytes": 11, "warning": ""}  # and a newline


def test_invalid_input_exits_2_with_the_rule(run: Invoke) -> None:
    result = run("retain", "--workspace", "w", "--agent", "../x", "--tier", "pins", "--mode", "append", "x")
    assert result.exit_code == 2
    assert "--agent '../x' is not a valid identifier" in result.output  # the option, not the field


def test_recall_with_no_match_says_so(run: Invoke) -> None:
    result = run("recall", "--workspace", "w", "--agent", "a", "anything")
    assert (result.exit_code, result.output.strip()) == (0, "no matches")


def test_read_and_forget_json(run: Invoke) -> None:
    read = run("read", "--workspace", "w", "--agent", "a", "--tier", "AGENT", "--json")
    assert json.loads(read.output) == {"id": "AGENT.md", "content": "", "quarantine": None}
    forget = run("forget", "--workspace", "w", "--agent", "a", "--id", "AGENT.md", "--json")
    assert json.loads(forget.output) == {"removed": 0}


def test_forget_needs_exactly_one_target(run: Invoke) -> None:
    result = run("forget", "--workspace", "w", "--agent", "a")
    assert result.exit_code == 2
    assert "must set exactly one of --id or --subject" in result.output


def test_health_ok_exits_0(run: Invoke) -> None:
    result = run("health", "--json")
    payload = json.loads(result.output)
    assert (result.exit_code, payload["provider"], payload["ok"]) == (0, "memory", True)


def test_unknown_provider_lists_installed() -> None:
    result = CliRunner().invoke(
        cli_module.cli, ["--provider", "nope", "recall", "--workspace", "w", "--agent", "a", "q"]
    )
    assert result.exit_code == 1
    assert "installed providers:" in result.output


def test_health_of_a_provider_that_cannot_open_is_not_ok() -> None:
    result = CliRunner().invoke(cli_module.cli, ["--provider", "nope", "health"])
    assert result.exit_code == 1
    assert result.output.startswith("nope: NOT OK: cannot open: no provider named 'nope'")


def test_unknown_option_names_the_setting() -> None:
    result = CliRunner().invoke(
        cli_module.cli,
        ["--provider", "memory", "-o", "path=x", "read", "--workspace", "w", "--agent", "a", "--tier", "AGENT"],
    )
    assert result.exit_code == 2
    assert "does not take setting 'path'" in result.output


def test_malformed_option_is_explained() -> None:
    result = CliRunner().invoke(
        cli_module.cli,
        ["--provider", "memory", "-o", "novalue", "read", "--workspace", "w", "--agent", "a", "--tier", "AGENT"],
    )
    assert result.exit_code == 2
    assert "--option key=value" in result.output


def test_config_file_selects_the_provider(tmp_path: Path) -> None:
    config = tmp_path / "memvault.toml"
    config.write_text('provider = "memory"\n')
    result = CliRunner().invoke(cli_module.cli, ["--config", str(config), "health"])
    assert result.output.strip() == "memory: ok"


def test_plugins_add_commands_through_memvault_register_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fakeplug_cmd.py").write_text(
        textwrap.dedent(
            """
            import click
            import memvault

            @memvault.hookimpl
            def memvault_register_commands(cli):
                @cli.command("hello")
                def hello():
                    click.echo("hello from a plugin")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib_metadata.EntryPoint(name="cmd", value="fakeplug_cmd", group="memvault")
    registry = Registry(entry_points=[ep])
    monkeypatch.setattr(cli_module, "get_registry", lambda: registry)
    group = click.Group(commands=dict(cli_module.cli.commands))
    monkeypatch.setattr(cli_module, "cli", group)
    cli_module._add_plugin_commands()
    result = CliRunner().invoke(group, ["hello"])
    assert result.output.strip() == "hello from a plugin"
    sys.modules.pop("fakeplug_cmd", None)


def test_memvault_is_exported_for_the_docs_quickstart() -> None:
    assert memvault.open.__module__ == "memvault.vault"
