"""``memvault retention show`` and ``memvault retention apply`` (contract P43)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

import memvault
from memvault import ReadRequest, RetainRequest
from memvault.cli import main as cli_module
from memvault.contract.clock import ManualClock, use_clock
from memvault.providers.memory import MemoryProvider
from memvault.registry import Registry

HOUR = dt.timedelta(hours=1)


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> MemoryProvider:
    """Every vault the CLI opens on ``memory`` in this test is the same store (a memory store lives in one vault)."""
    store = MemoryProvider()
    real = Registry.get

    def get(self: Registry, name: str) -> object:
        info = real(self, name)
        return attrs.evolve(info, factory=lambda: store) if name == "memory" else info

    monkeypatch.setattr(Registry, "get", get)
    monkeypatch.setenv("MEMVAULT_EMBEDDER", "off")
    return store


def _config(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "memvault.toml"
    path.write_text(f'provider = "memory"\nscanner = "off"\n{extra}')
    return str(path)


def _fill(clock: ManualClock, config: str) -> None:
    with memvault.open_from_config(config) as vault:
        for n in range(3):
            vault.retain(
                RetainRequest(
                    workspace_id="w",
                    agent_id="a",
                    tier="peers",
                    key=f"p{n}",
                    content=f"short-lived {n}\n",
                    mode="append",
                    expires_at=clock() + HOUR,
                )
            )
        vault.retain(RetainRequest(workspace_id="w", agent_id="a", tier="pins", content="kept\n", mode="append"))


def test_apply_dry_run_lists_and_keeps_then_apply_removes(shared: MemoryProvider, tmp_path: Path) -> None:
    config = _config(tmp_path)
    clock = ManualClock()
    with use_clock(clock):
        _fill(clock, config)
        clock.advance(2 * HOUR)
        runner = CliRunner()
        dry = runner.invoke(cli_module.cli, ["--config", config, "retention", "apply", "--dry-run"])
        assert dry.exit_code == 0, dry.output
        assert "would remove 3 document(s)" in dry.stdout
        assert dry.stdout.count("peers/p") == 3
        assert "so far" in dry.stderr
        assert shared.memvault_health().retention_overdue == 3, "a dry run removes nothing"
        done = runner.invoke(cli_module.cli, ["--config", config, "retention", "apply", "--json"])
        assert done.exit_code == 0, done.output
        payload = json.loads(done.stdout)
        assert sorted(d["label"] for d in payload["documents"]) == ["peers/p0.md", "peers/p1.md", "peers/p2.md"]
        assert payload["dry_run"] is False
        again = runner.invoke(cli_module.cli, ["--config", config, "retention", "apply"])
        assert (again.exit_code, "removed 0 document(s)" in again.stdout) == (0, True)
    with memvault.open_from_config(config) as vault:
        assert vault.read(ReadRequest(workspace_id="w", agent_id="a", tier="pins")).content == "kept\n"


def test_show_prints_the_policy(tmp_path: Path) -> None:
    config = _config(
        tmp_path, '[retention]\ndaily = "90d"\nsweep_interval = "6h"\n[retention.workspaces.acme]\ndaily = "off"\n'
    )
    result = CliRunner().invoke(cli_module.cli, ["--config", config, "retention", "show"])
    assert result.exit_code == 0, result.output
    assert "(default)  daily  90d" in result.output
    assert "acme       daily  off" in result.output
    assert "every 6h" in result.output
    payload = json.loads(CliRunner().invoke(cli_module.cli, ["--config", config, "retention", "show", "--json"]).stdout)
    assert payload == {
        "tiers": {"daily": "90d"},
        "workspaces": {"acme": {"daily": "off"}},
        "sweep_interval": "6h",
        "idempotency_window": "1d",
    }


def test_a_bad_duration_is_an_error_naming_the_key(tmp_path: Path) -> None:
    config = _config(tmp_path, '[retention]\ndaily = "ninety days"\n')
    for command in (["retention", "show"], ["retention", "apply"]):
        result = CliRunner().invoke(cli_module.cli, ["--config", config, *command])
        assert result.exit_code == 2
        assert "retention.daily" in result.output
