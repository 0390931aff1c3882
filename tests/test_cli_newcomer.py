"""The `memvault` command as a newcomer meets it (#37): one test per surprise found trying it.

Each command is the installed console script in its own process, in an empty
temporary directory, with every plugin of this repository installed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

MEMVAULT = str(Path(sys.executable).with_name("memvault"))
AGENT = ("--workspace", "acme", "--agent", "planner")


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
        timeout=120,
        env={**base, "MEMVAULT_EMBEDDER": "off", **(env or {})},
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def read_pins(cwd: Path) -> str:
    return ok(run(cwd, "read", *AGENT, "--tier", "pins", "--json")).stdout


def body(cwd: Path) -> str:
    return str(json.loads(read_pins(cwd))["content"])


# -- retain ends content with a newline ------------------------------------------------------------


def test_appended_facts_stay_on_lines_of_their_own(tmp_path: Path) -> None:
    for fact in ("First fact.", "Second fact."):
        ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", fact))
    assert body(tmp_path) == "First fact.\nSecond fact.\n"


def test_content_already_ending_in_a_newline_gets_none_added(tmp_path: Path) -> None:
    ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", "One.\n"))
    ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", "-", stdin="Two.\n"))
    assert body(tmp_path) == "One.\nTwo.\n"


def test_standard_input_without_a_final_newline_gets_one(tmp_path: Path) -> None:
    ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", stdin="From a pipe."))
    ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", stdin="Another."))
    assert body(tmp_path) == "From a pipe.\nAnother.\n"


def test_no_newline_stores_the_content_exactly(tmp_path: Path) -> None:
    ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", "--no-newline", "a"))
    ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", "--no-newline", "b"))
    assert body(tmp_path) == "ab"


def test_retain_help_says_a_newline_is_added(tmp_path: Path) -> None:
    text = " ".join(ok(run(tmp_path, "retain", "--help")).stdout.split())
    assert "ends with a newline" in text
    assert "--no-newline" in text


# -- doctor ----------------------------------------------------------------------------------------


def test_doctor_does_not_warn_about_an_installed_provider_nobody_configured(tmp_path: Path) -> None:
    """postgres is installed in the dev venv with no server at its default address: not a problem
    where another provider is the configured store (and where it is, the store check probes it)."""
    out = ok(run(tmp_path, "doctor")).stdout
    assert "give it its server's address" not in out
    rows = [line for line in out.splitlines() if line.startswith("provider ")]
    assert rows, out
    assert all(re.match(r"provider \S+\s+ok\s", row) for row in rows), out
    assert out.rstrip().endswith("no problems found"), out


@pytest.mark.parametrize("columns", [None, "60", "100", "300"])
def test_doctor_table_fits_the_terminal_and_100_columns(tmp_path: Path, columns: str | None) -> None:
    env = {"COLUMNS": columns} if columns else {}
    if not columns:
        env["COLUMNS"] = ""  # not a terminal, no width: the default
    out = run(tmp_path, "doctor", env=env).stdout
    limit = min(int(columns), 100) if columns and int(columns) >= 60 else 100
    wide = [line for line in out.splitlines() if len(line) > limit and not line.startswith("  ")]
    assert not wide, f"lines over {limit} columns:\n" + "\n".join(wide)


def test_recall_table_fits_100_columns(tmp_path: Path) -> None:
    long = "Deploys " + "on Fridays are banned because the weekend team is small and tired " * 3
    ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", long))
    out = ok(run(tmp_path, "recall", *AGENT, "--explain", "deploys", env={"COLUMNS": ""})).stdout
    assert max(len(line) for line in out.splitlines()) <= 100, out


# -- hints that work as printed --------------------------------------------------------------------


def _hinted_commands(text: str) -> list[str]:
    return [c for c in re.findall(r"`(memvault [^`]+)`", text)]


def test_serve_hint_creates_a_token_as_printed(tmp_path: Path) -> None:
    """The no-token warning of `memvault serve` names a command; run it exactly as printed."""
    result = run(tmp_path, "serve", "--host", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    hints = _hinted_commands(result.stderr)
    assert hints, result.stderr
    for hint in hints:
        made = ok(run(tmp_path, *shlex.split(hint)[1:]))
        assert made.stdout.startswith("[[tokens]]")


def test_missing_tokens_file_hint_writes_a_file_serve_accepts(tmp_path: Path) -> None:
    result = run(tmp_path, "serve", "--port", "0", "--tokens-file", "tokens.toml")
    assert result.returncode == 2
    (hint,) = _hinted_commands(result.stderr)
    assert hint.endswith(">> " + str(tmp_path / "tokens.toml")), hint
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    env["PATH"] = f"{Path(MEMVAULT).parent}{os.pathsep}{env['PATH']}"
    subprocess.run(["bash", "-c", hint], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=60)
    from memvault_http_remote.settings import load_tokens_file

    assert len(load_tokens_file(tmp_path / "tokens.toml")) == 1


def test_a_401_from_a_service_says_how_to_pass_the_token(tmp_path: Path) -> None:
    from conftest import LinePump

    made = ok(run(tmp_path, "token", "new", "--name", "ci", "--workspace", "*"))
    (tmp_path / "tokens.toml").write_text(made.stdout)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    server = subprocess.Popen(
        [MEMVAULT, "serve", "--port", "0", "--tokens-file", "tokens.toml", "-o", "path=served.db"],
        cwd=tmp_path,
        env={**env, "MEMVAULT_EMBEDDER": "off"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert server.stdout is not None
    pump = LinePump(server.stdout)
    try:
        pump.wait_for("listening on", 60)
        found = re.search(r"listening on (http://\S+)", "".join(pump.lines))
        assert found is not None
        result = run(tmp_path, "--provider", "http-remote", "-o", f"url={found.group(1)}", "recall", *AGENT, "q")
        assert result.returncode == 1
        assert "-o token=" in result.stderr, result.stderr
    finally:
        server.terminate()
        server.wait(30)


# -- errors in the words of the command line -------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says", "not_says"),
    [
        (["forget", "--workspace", "w", "--agent", "a"], "exactly one of --id or --subject", "data_subject_id"),
        (["retain", "--workspace", "w", "--tier", "AGENT", "--mode", "append", "x"], "--agent", "agent_id"),
        (["retain", "--workspace", "w", "--tier", "CREW", "--mode", "append", "x"], "--crew", "crew_id"),
        (["recall", "--workspace", "w", "q"], "--agent or --crew", "agent_id"),
        (
            ["retain", "--workspace", "w/x", "--agent", "a", "--tier", "AGENT", "--mode", "append", "x"],
            "--workspace",
            "workspace_id",
        ),
        (["retain", *AGENT, "--tier", "peers", "--mode", "append", "x"], "--key is required", "error: key "),
    ],
)
def test_errors_name_the_options_not_the_python_fields(
    tmp_path: Path, args: list[str], says: str, not_says: str
) -> None:
    result = run(tmp_path, *args)
    assert result.returncode == 2
    assert says in result.stderr
    assert not_says not in result.stderr


def test_cap_error_after_a_replace_says_mode_replace_as_a_flag(tmp_path: Path) -> None:
    ok(run(tmp_path, "retain", *AGENT, "--tier", "AGENT", "--mode", "replace", "x" * 3900))
    result = run(tmp_path, "retain", *AGENT, "--tier", "AGENT", "--mode", "append", "y" * 200)
    assert result.returncode == 1
    assert "--mode replace" in result.stderr
    assert "mode='replace'" not in result.stderr


def test_import_errors_keep_the_file_s_field_names(tmp_path: Path) -> None:
    """The fields an import names are the export file's, not options: they stay as written."""
    line = {"kind": "header", "format": "memvault-export", "version": 1, "created_at": "2026-01-01T00:00:00+00:00"}
    doc = {"kind": "document", "document": {"workspace_id": "w/x"}, "body": "x"}
    (tmp_path / "bad.jsonl").write_text(json.dumps(line) + "\n" + json.dumps(doc) + "\n")
    result = run(tmp_path, "import", "bad.jsonl", "--no-progress")
    assert result.returncode != 0
    assert "--workspace" not in result.stderr, result.stderr


# -- read-only commands never create the store ----------------------------------------------------


READ_ONLY = [
    ["health"],
    ["recall", *AGENT, "deploys"],
    ["read", *AGENT, "--tier", "AGENT"],
    ["inspect"],
    ["export", "--no-progress"],
    ["quarantine", "list", "--workspace", "acme"],
    ["quarantine", "show", "--workspace", "acme", "0123456789abcdef"],
    ["doctor"],
    ["mcp", "--check", "--slot", "notes"],
    ["--provider", "local-disk", "-o", "root=store", "recall", *AGENT, "deploys"],
    ["--provider", "local-disk", "-o", "root=store", "inspect"],
]


@pytest.mark.parametrize("args", READ_ONLY, ids=lambda a: " ".join(a))
def test_a_read_only_command_creates_no_store(tmp_path: Path, args: list[str]) -> None:
    if args[0] == "mcp":
        pytest.importorskip("memvault_mcp")
    result = run(tmp_path, *args)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], result.stdout + result.stderr
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    if args[0] not in ("doctor", "mcp"):
        assert result.returncode != 0
        assert "no store at " in output, output
        assert "retain something first" in output
    else:
        assert result.returncode == 0, output


def test_read_only_commands_work_once_the_store_exists(tmp_path: Path) -> None:
    ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", "Deploys on Fridays are banned."))
    assert "pins.md:1" in ok(run(tmp_path, "recall", *AGENT, "deploys")).stdout
    assert ok(run(tmp_path, "health")).stdout.strip() == "sqlite: ok"


# -- --json, parity --json, recall --limit, read --key, import from stdin, port in use -----------


@pytest.mark.parametrize(
    "args", [["providers"], ["doctor"], ["recall", *AGENT, "deploys"], ["inspect"], ["retention", "show"]]
)
def test_json_before_the_command_works_as_after_it(tmp_path: Path, args: list[str]) -> None:
    ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", "Deploys on Fridays are banned."))
    before = ok(run(tmp_path, "--json", *args)).stdout
    after = ok(run(tmp_path, *args, "--json")).stdout
    assert isinstance(json.loads(before), dict)
    assert json.loads(before).keys() == json.loads(after).keys()


def test_parity_prints_a_json_summary(tmp_path: Path) -> None:
    pytest.importorskip("memvault_parity")
    result = run(tmp_path, "parity", "memory", "-k", "p1 or P1", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout)
    assert summary["provider"] == "memory"
    assert summary["ok"] is True
    assert summary["passed"] > 0
    assert summary["failed"] == []
    assert "passed" in result.stderr  # pytest's report is still there, on stderr


@pytest.mark.parametrize("limit", ["0", "21", "50", "-1"])
def test_recall_limit_outside_1_20_is_refused(tmp_path: Path, limit: str) -> None:
    result = run(tmp_path, "recall", *AGENT, "--limit", limit, "deploys")
    assert result.returncode == 2
    assert "--limit" in result.stderr
    assert "1<=x<=20" in result.stderr


def test_recall_limit_is_kept_within_1_20(tmp_path: Path) -> None:
    for n in range(5):
        ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", f"deploy number {n}"))
    hits = json.loads(ok(run(tmp_path, "recall", *AGENT, "--limit", "2", "--json", "deploy")).stdout)["hits"]
    assert len(hits) == 2


@pytest.mark.parametrize("tier", ["AGENT", "pins", "PERSONA", "lessons"])
def test_read_key_on_a_one_document_tier_is_refused(tmp_path: Path, tier: str) -> None:
    result = run(tmp_path, "read", *AGENT, "--tier", tier, "--key", "2026-01-31")
    assert result.returncode == 2
    assert "--key applies to daily and peers only" in result.stderr


def test_read_key_still_picks_a_daily_document(tmp_path: Path) -> None:
    ok(run(tmp_path, "retain", *AGENT, "--tier", "daily", "--key", "2026-01-31", "--mode", "append", "Shipped."))
    out = ok(run(tmp_path, "read", *AGENT, "--tier", "daily", "--key", "2026-01-31")).stdout
    assert out.startswith("Shipped.")


def test_import_from_stdin_names_stdin_in_its_errors(tmp_path: Path) -> None:
    ok(run(tmp_path, "retain", *AGENT, "--tier", "pins", "--mode", "append", "x"))
    result = run(tmp_path, "import", "-", "--no-progress", stdin="not json\n")
    assert result.returncode == 2
    assert "<stdin>" in result.stderr
    assert "memvault-import-" not in result.stderr
    assert "stdin.jsonl" not in result.stderr


@pytest.mark.parametrize("command", [["serve"], ["mcp", "--transport", "http", "--slot", "notes"]])
def test_a_port_in_use_says_so_and_what_to_do(tmp_path: Path, command: list[str]) -> None:
    if command[0] == "mcp":
        pytest.importorskip("memvault_mcp")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(tmp_path, *command, "--port", str(port))
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use: stop the other process, or pass another --port" in result.stderr
    assert "Errno" not in result.stderr
    assert not (tmp_path / "memvault.db").exists()
