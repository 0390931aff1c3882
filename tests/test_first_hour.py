"""A newcomer's first hour (issue 15), each case typed as a user types it: the
installed `memvault` command in a fresh directory, one process per command.

Covers: provider settings never collide with the CLI's or the facade's own
arguments (`-o path=` on every verb), a missing required setting is named with
its meaning and how to pass it (for every provider, a third-party one included),
a missing config file blames what named it, a mistyped provider name gets a
suggestion, and `serve` reports a bad provider before any warning.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MEMVAULT = str(Path(sys.executable).with_name("memvault"))


def run(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    return subprocess.run(
        [MEMVAULT, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**base, **(env or {})},
        check=False,
        stdin=subprocess.DEVNULL,
    )


PART = ("--workspace", "w1", "--agent", "a1")

#: Every verb that opens a provider, as a user types it after `memvault -o path=x.db`.
VERBS = {
    "retain": ("retain", *PART, "--tier", "pins", "--mode", "append", "Prefers metric units."),
    "recall": ("recall", *PART, "metric units"),
    "read": ("read", *PART, "--tier", "pins"),
    "forget": ("forget", *PART, "--id", "pins.md"),
    "health": ("health",),
    "quarantine list": ("quarantine", "list", "--workspace", "w1"),
}


# --- item 2: `-o path=` never collides with the facade's own arguments ---------------


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_dash_o_path_works_on_every_verb_without_provider(verb: str, tmp_path: Path) -> None:
    if verb != "retain":  # a read-only verb never creates the store (#37): write first
        assert run(tmp_path, "-o", "path=x.db", *VERBS["retain"]).returncode == 0
    result = run(tmp_path, "-o", "path=x.db", *VERBS[verb])
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "x.db").exists()
    assert not (tmp_path / "memvault.db").exists()


def test_dash_o_path_selects_the_database_the_verbs_use(tmp_path: Path) -> None:
    assert run(tmp_path, "-o", "path=x.db", *VERBS["retain"]).returncode == 0
    found = run(tmp_path, "-o", "path=x.db", "recall", "--json", *PART, "metric units")
    assert json.loads(found.stdout)["hits"], found.stdout + found.stderr
    elsewhere = run(tmp_path, "-o", "path=y.db", "recall", "--json", *PART, "metric units")
    assert elsewhere.returncode == 1
    assert "no store at y.db yet" in elsewhere.stderr  # and a recall does not create it (#37)
    assert not (tmp_path / "y.db").exists()


def test_dash_o_path_with_a_config_file_overrides_its_path(tmp_path: Path) -> None:
    (tmp_path / "memvault.toml").write_text('provider = "sqlite"\n[providers.sqlite]\npath = "from-config.db"\n')
    assert run(tmp_path, "-o", "path=x.db", *VERBS["retain"]).returncode == 0
    assert (tmp_path / "x.db").exists()
    assert not (tmp_path / "from-config.db").exists()


def test_dash_o_config_is_refused_with_the_option_to_use(tmp_path: Path) -> None:
    result = run(tmp_path, "-o", "config=other.toml", "recall", *PART, "q")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--config PATH" in result.stderr


def test_open_from_config_takes_provider_path_as_a_setting(tmp_path: Path) -> None:
    """In Python, `path=` is the sqlite setting, never the config file."""
    code = textwrap.dedent(
        """
        import memvault
        with memvault.open_from_config(path="fresh.db") as vault:
            vault.retain(memvault.RetainRequest(workspace_id="w", agent_id="a", tier="pins",
                                                content="x\\n", mode="append"))
        cfg = "[providers.sqlite]\\npath = 'cfg.db'\\n"
        open("my.toml", "w").write(cfg)
        with memvault.open_from_config(config="my.toml", path="override.db") as vault:
            print(vault.name)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "fresh.db").exists()
    assert (tmp_path / "override.db").exists()
    assert not (tmp_path / "cfg.db").exists()


# --- a third-party provider, installed for real (a dist-info on the path) -------------


def install_fake_distribution(site: Path, module: str, body: str) -> dict[str, str]:
    """Write a module and its .dist-info (entry point group `memvault`) into ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(body))
    info = site / f"{module.replace('_', '-')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[memvault]\n{module} = {module}\n")
    return {"PYTHONPATH": str(site)}


THIRD_PARTY = """
    import memvault
    from memvault.providers.memory import MemoryProvider


    class Provider(MemoryProvider):
        '''A test provider (in memory, whatever the bucket).

        :param bucket: the object-store bucket that holds the memories.
        '''

        def __init__(self, bucket: str, region: str = "eu") -> None:
            super().__init__()
            self.bucket = bucket


    @memvault.hookimpl
    def memvault_register_providers(register):
        register("acme-store", Provider)
"""

RESERVED = """
    import memvault


    class Provider:
        def __init__(self, scanner: str = "") -> None:
            pass


    @memvault.hookimpl
    def memvault_register_providers(register):
        register("bad-store", Provider)
"""


# --- item 3: a missing required setting says which, what it means and how to pass it --


@pytest.mark.parametrize(
    ("provider", "setting", "meaning"),
    [
        ("local-disk", "root", "the memory root folder"),
        ("http-remote", "url", "base URL"),
    ],
)
@pytest.mark.parametrize("verb", ["health", "recall", "retain"])
def test_missing_required_setting_is_named_with_how_to_pass_it(
    provider: str, setting: str, meaning: str, verb: str, tmp_path: Path
) -> None:
    result = run(tmp_path, "--provider", provider, *VERBS[verb])
    assert result.returncode == (1 if verb == "health" else 2)
    message = result.stderr + result.stdout
    assert "bug in the provider" not in message
    assert "TypeError" not in message
    assert f"needs the setting {setting!r}" in message
    assert meaning in message
    assert f"-o {setting}=VALUE" in message
    assert f"[providers.{provider}]" in message


def test_serve_with_a_provider_missing_its_setting_names_it(tmp_path: Path) -> None:
    result = run(tmp_path, "serve", "--provider", "local-disk", "--port", "0", timeout=30)
    assert result.returncode == 2
    assert "needs the setting 'root'" in result.stderr
    assert "-o root=VALUE" in result.stderr
    assert "bug in the provider" not in result.stderr


def test_third_party_provider_missing_setting_is_explained_from_its_docstring(tmp_path: Path) -> None:
    env = install_fake_distribution(tmp_path / "site", "acme_store", THIRD_PARTY)
    listed = run(tmp_path, "providers", "--json", env=env)
    assert "acme-store" in {p["name"] for p in json.loads(listed.stdout)["providers"]}
    result = run(tmp_path, "--provider", "acme-store", "recall", *PART, "q", env=env)
    assert result.returncode == 2, result.stderr
    assert "needs the setting 'bucket' (the object-store bucket that holds the memories)" in result.stderr
    assert "-o bucket=VALUE" in result.stderr
    assert "region" not in result.stderr  # optional settings are not demanded
    ok = run(tmp_path, "--provider", "acme-store", "-o", "bucket=b", "health", env=env)
    assert ok.returncode == 0, ok.stderr


def test_provider_taking_a_reserved_setting_name_is_refused_at_registration(tmp_path: Path) -> None:
    env = install_fake_distribution(tmp_path / "site", "bad_store", RESERVED)
    result = run(tmp_path, "providers", env=env)
    assert result.returncode == 0
    assert "bad-store" not in result.stdout
    assert "not usable" in result.stderr
    assert "'scanner'" in result.stderr
    assert "rename that setting" in result.stderr


# --- item 7: the smaller things -------------------------------------------------------


def test_missing_config_named_by_option_blames_the_option_not_the_variable(tmp_path: Path) -> None:
    result = run(tmp_path, "--config", "missing.toml", "recall", *PART, "q")
    assert result.returncode == 2
    assert "'missing.toml' does not exist" in result.stderr
    assert "MEMVAULT_CONFIG" not in result.stderr
    assert "--config" in result.stderr


def test_missing_config_named_by_the_variable_blames_the_variable(tmp_path: Path) -> None:
    result = run(tmp_path, "recall", *PART, "q", env={"MEMVAULT_CONFIG": "gone.toml"})
    assert result.returncode == 2
    assert "'gone.toml' does not exist" in result.stderr
    assert "MEMVAULT_CONFIG" in result.stderr


@pytest.mark.parametrize(("typed", "meant"), [("sqlit", "sqlite"), ("local_disk", "local-disk"), ("memroy", "memory")])
def test_mistyped_provider_suggests_the_installed_name(typed: str, meant: str, tmp_path: Path) -> None:
    result = run(tmp_path, "--provider", typed, "recall", *PART, "q")
    assert result.returncode == 1
    assert f"did you mean {meant!r}?" in result.stderr
    assert f"pip install memvault-{typed}" not in result.stderr


def test_unknown_provider_far_from_any_name_still_suggests_installing(tmp_path: Path) -> None:
    result = run(tmp_path, "--provider", "zzzzzz", "recall", *PART, "q")
    assert "did you mean" not in result.stderr
    assert "pip install memvault-zzzzzz" in result.stderr


@pytest.mark.parametrize("args", [("--provider", "sqlit"), ("--provider", "local-disk")])
def test_serve_reports_a_bad_provider_before_any_warning(args: tuple[str, ...], tmp_path: Path) -> None:
    result = run(tmp_path, "serve", *args, "--port", "0", timeout=30)
    assert result.returncode != 0
    assert result.stderr.startswith("error: "), result.stderr
    assert "warning: no tokens" not in result.stderr


# --- memvault doctor --------------------------------------------------------------------


def test_doctor_on_a_fresh_directory_finds_nothing_wrong_and_writes_nothing(tmp_path: Path) -> None:
    result = run(tmp_path, "doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    for check in ("python", "providers", "provider sqlite", "config", "store (sqlite)", "disk"):
        assert check in result.stdout
    assert "no problems found" in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_doctor_reports_schema_version_and_integrity_of_the_sqlite_store(tmp_path: Path) -> None:
    assert run(tmp_path, *VERBS["retain"]).returncode == 0
    result = run(tmp_path, "doctor", "--json")
    assert result.returncode == 0, result.stdout
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["schema"]["status"] == "ok"
    assert "schema version" in checks["schema"]["detail"]
    assert checks["integrity"]["status"] == "ok"


def test_doctor_fails_on_a_schema_newer_than_the_installed_code(tmp_path: Path) -> None:
    import sqlite3

    assert run(tmp_path, *VERBS["retain"]).returncode == 0
    with sqlite3.connect(tmp_path / "memvault.db") as conn:
        conn.execute("PRAGMA user_version = 999")
    result = run(tmp_path, "doctor")
    assert result.returncode == 1
    assert "schema version 999" in result.stdout
    assert "to fix:" in result.stdout
    assert "upgrade memvault-sqlite" in result.stdout


def test_doctor_fails_on_a_corrupt_database(tmp_path: Path) -> None:
    import memvault

    db = tmp_path / "memvault.db"
    with memvault.open("sqlite", path=str(db)) as vault:
        for n in range(40):
            vault.retain(
                memvault.RetainRequest(
                    workspace_id="w1", agent_id=f"a{n}", tier="pins", content=f"line {n} " * 50 + "\n", mode="append"
                )
            )
    data = bytearray(db.read_bytes())
    assert len(data) > 5 * 4096
    data[3 * 4096 : 5 * 4096] = b"\xa5" * (2 * 4096)  # two pages of garbage, header intact
    db.write_bytes(bytes(data))
    for side in ("memvault.db-wal", "memvault.db-shm"):
        (tmp_path / side).unlink(missing_ok=True)
    result = run(tmp_path, "doctor", "--json")
    assert result.returncode == 1
    payload = json.loads(result.stdout)
    assert payload["ok"] is False
    failed = [c for c in payload["checks"] if c["status"] == "fail"]
    assert failed
    assert all(c["fix"] for c in failed)


def test_doctor_names_a_broken_plugin_and_how_to_skip_it(tmp_path: Path) -> None:
    env = install_fake_distribution(tmp_path / "site", "broken_store", "import not_a_module_anywhere\n")
    result = run(tmp_path, "doctor", env=env)
    assert result.returncode == 1
    assert "plugin broken_store" in result.stdout
    assert "MEMVAULT_DISABLE_PLUGINS=broken_store" in result.stdout


def test_doctor_reports_a_bad_config_and_a_missing_setting(tmp_path: Path) -> None:
    (tmp_path / "memvault.toml").write_text('provider = "local-disk"\n')
    result = run(tmp_path, "doctor")
    assert result.returncode == 1
    assert "needs the setting 'root'" in result.stdout
    (tmp_path / "memvault.toml").write_text("provider = \n")
    result = run(tmp_path, "doctor")
    assert result.returncode == 1
    assert "not valid TOML" in result.stdout


def test_parity_run_shows_progress_as_tests_run(tmp_path: Path) -> None:
    """A long `memvault parity` run prints a mark per test and the share done, then a one-line verdict."""
    result = run(tmp_path, "parity", "memory", "-k", "forget", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    # The run first says where it works (its scratch stores), then prints a mark per test.
    marks = [line for line in result.stdout.splitlines() if re.fullmatch(r"[.sxF]+\s+\[\s*\d+%\]", line)]
    assert marks, result.stdout
    assert "[100%]" in result.stdout
    assert "memvault parity memory: PASS" in result.stdout
