"""The installed `memvault` command end to end, with every plugin of this repository installed.

Contract D1 (installed plugins appear with distribution and version), D3 (the
provider comes from configuration; unknown names list the installed ones), and
the verbs over the embedded SQLite default, each command a separate process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

MEMVAULT = str(Path(sys.executable).with_name("memvault"))


def run(
    cwd: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    return subprocess.run(
        [MEMVAULT, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
        check=False,
    )


def test_d1_every_plugin_of_the_repository_is_listed_with_its_distribution(tmp_path: Path) -> None:
    result = run(tmp_path, "providers", "--json")
    assert result.returncode == 0, result.stderr
    found = {p["name"]: (p["distribution"], p["version"]) for p in json.loads(result.stdout)["providers"]}
    assert found["memory"][0] == "memvault"
    assert found["sqlite"][0] == "memvault-sqlite"
    assert found["local-disk"][0] == "memvault-local-disk"
    assert found["http-remote"][0] == "memvault-http-remote"
    assert all(version and version != "?" for _, version in found.values())


def test_d2_deny_list_hides_a_plugin(tmp_path: Path) -> None:
    result = run(tmp_path, "providers", "--json", env={"MEMVAULT_DISABLE_PLUGINS": "local-disk"})
    names = {p["name"] for p in json.loads(result.stdout)["providers"]}
    assert "local-disk" not in names
    assert {"memory", "sqlite"} <= names


def test_d3_unknown_provider_lists_every_installed_one(tmp_path: Path) -> None:
    result = run(tmp_path, "--provider", "couchdb", "recall", "--workspace", "w", "--agent", "a", "q")
    assert result.returncode == 1
    assert "no provider named 'couchdb'" in result.stderr
    for name in ("http-remote", "local-disk", "memory", "sqlite"):
        assert name in result.stderr


def test_verbs_round_trip_on_the_sqlite_default_across_processes(tmp_path: Path) -> None:
    stored = run(
        tmp_path,
        "retain",
        "--workspace",
        "acme",
        "--agent",
        "planner",
        "--tier",
        "pins",
        "--mode",
        "append",
        "--subject",
        "user-7",
        "Deploys on Fridays are banned.\n",
    )
    assert stored.returncode == 0, stored.stderr
    assert stored.stdout.strip() == "stored pins.md (31 bytes)"
    assert (tmp_path / "memvault.db").exists()

    recalled = run(
        tmp_path, "recall", "--workspace", "acme", "--agent", "planner", "--json", "when are deploys banned?"
    )
    hits = json.loads(recalled.stdout)["hits"]
    assert [(h["source"], h["line"], h["snippet"]) for h in hits] == [("pins.md", 1, "Deploys on Fridays are banned.")]

    read = run(tmp_path, "read", "--workspace", "acme", "--agent", "planner", "--tier", "pins")
    assert read.stdout == "Deploys on Fridays are banned.\n\n"

    erased = run(tmp_path, "forget", "--workspace", "acme", "--subject", "user-7", "--json")
    assert json.loads(erased.stdout) == {"removed": 1}
    again = run(tmp_path, "recall", "--workspace", "acme", "--agent", "planner", "deploys")
    assert again.stdout.strip() == "no matches"


def test_config_file_picks_local_disk_with_its_root(tmp_path: Path) -> None:
    (tmp_path / "memvault.toml").write_text('provider = "local-disk"\n[providers.local-disk]\nroot = "notes"\n')
    stored = run(tmp_path, "retain", "--workspace", "w", "--agent", "a", "--tier", "AGENT", "--mode", "replace", "hi")
    assert stored.returncode == 0, stored.stderr
    assert (tmp_path / "notes" / "w" / "agents" / "a" / "AGENT.md").read_text() == "hi\n"  # the CLI ends it


def test_health_of_an_unusable_store_exits_1(tmp_path: Path) -> None:
    (tmp_path / "not-a-db").write_text("plain text, not SQLite")
    result = run(tmp_path, "--provider", "sqlite", "--option", "path=not-a-db", "health")
    assert result.returncode == 1
    assert "NOT OK: cannot open" in result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args", [["recall", "--workspace", "w", "--agent", "a", " "], ["read", "--workspace", "w", "--tier", "AGENT"]]
)
def test_invalid_input_exits_2_and_names_the_rule(tmp_path: Path, args: list[str]) -> None:
    result = run(tmp_path, *args)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert not (tmp_path / "memvault.db").exists()
