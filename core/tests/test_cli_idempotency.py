"""``memvault retain`` names each write with an idempotency key (P44): a command run again is stored once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memvault.cli import main as cli_module

RETAIN = ("retain", "--workspace", "w", "--agent", "a", "--tier", "pins", "--mode", "append", "--json")


def _local_disk(root: Path, *args: str) -> tuple[int, str]:
    pytest.importorskip("memvault_local_disk", reason="a store that outlives one command")
    result = CliRunner().invoke(cli_module.cli, ["--provider", "local-disk", "-o", f"root={root}", *args])
    return result.exit_code, result.output


def test_json_prints_the_generated_key() -> None:
    result = CliRunner().invoke(cli_module.cli, ["--provider", "memory", *RETAIN, "likes tea"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed["idempotency_key"].startswith("mv-")
    assert {k: printed[k] for k in ("id", "bytes", "warning")} == {"id": "pins.md", "bytes": 10, "warning": ""}


def test_the_same_command_with_its_key_again_stores_once(tmp_path: Path) -> None:
    code, first = _local_disk(tmp_path, *RETAIN, "likes tea")
    assert code == 0, first
    key = json.loads(first)["idempotency_key"]
    code, again = _local_disk(tmp_path, *RETAIN, "--idempotency-key", key, "likes tea")
    assert code == 0, again
    assert json.loads(again) == json.loads(first)
    code, read = _local_disk(tmp_path, "read", "--workspace", "w", "--agent", "a", "--tier", "pins")
    assert read.count("likes tea") == 1


def test_the_key_with_another_write_is_refused(tmp_path: Path) -> None:
    assert _local_disk(tmp_path, *RETAIN, "--idempotency-key", "op-1", "likes tea")[0] == 0
    code, output = _local_disk(tmp_path, *RETAIN, "--idempotency-key", "op-1", "likes coffee")
    assert code != 0
    assert "op-1" in output
    assert "use a new key" in output
