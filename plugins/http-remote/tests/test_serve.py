"""`memvault serve` as a process: where it listens, warnings and refusals, logs, SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import httpx
from click.testing import CliRunner
from httpremote_support import HERE, ServerProcess, memvault_command

import memvault
from memvault_http_remote.commands import token
from memvault_http_remote.settings import ServerSettings, TokenStore, hash_token

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

RECALL = memvault.RecallRequest(workspace_id="w1", agent_id="a1", query="anything")


def test_sigterm_lets_an_in_flight_request_finish(tmp_path: Path) -> None:
    """The recall takes 1.5 s; SIGTERM arrives while the provider runs it; it still succeeds; exit 0."""
    server = ServerProcess([sys.executable, str(HERE / "slow_server.py"), "1.5"], tmp_path)
    outcome: list[object] = []

    def call() -> None:
        with memvault.open("http-remote", url=server.url, timeout=10.0) as vault:
            try:
                outcome.append(vault.recall(RECALL))
            except memvault.MemvaultError as exc:
                outcome.append(exc)

    worker = threading.Thread(target=call)
    try:
        worker.start()
        assert server.lines.get(timeout=30) == "recall started"
        server.terminate()
        worker.join(10)
        code = server.proc.wait(10)
    finally:
        server.stop()
    assert [type(o).__name__ for o in outcome] == ["RecallResult"]
    assert code == 0


def test_no_new_connections_after_sigterm(tmp_path: Path) -> None:
    server = ServerProcess([sys.executable, str(HERE / "slow_server.py"), "0"], tmp_path)
    assert server.stop() == 0
    try:
        httpx.get(f"{server.url}/v1/health", timeout=1.0)
        reachable = True
    except httpx.TransportError:
        reachable = False
    assert reachable is False


def test_serve_prints_where_it_listens_and_logs_one_line_per_request(tmp_path: Path) -> None:
    server = ServerProcess(memvault_command("serve", "--provider", "memory", "--port", "0"), tmp_path)
    try:
        for _ in range(3):
            httpx.get(f"{server.url}/v1/health", timeout=5.0)
    finally:
        assert server.stop() == 0
    assert server.url.startswith("http://127.0.0.1:")
    request_lines = [line for line in server.stderr_lines if "GET /v1/health 200" in line]
    assert len(request_lines) == 3


def test_no_tokens_on_loopback_serves_with_a_clear_warning(tmp_path: Path) -> None:
    server = ServerProcess(memvault_command("serve", "--provider", "memory", "--port", "0"), tmp_path)
    server.stop()
    assert any(line.startswith("warning: no tokens configured") for line in server.stderr_lines)


def test_no_tokens_on_a_public_address_refuses_to_start(tmp_path: Path) -> None:
    result = subprocess.run(
        memvault_command("serve", "--provider", "memory", "--host", "0.0.0.0", "--port", "0"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 2
    assert "--insecure-no-auth" in result.stderr
    assert "listening" not in result.stdout


def test_serve_with_no_arguments_serves_sqlite_in_memvault_db_here(tmp_path: Path) -> None:
    """The README's first command: embedded sqlite, ./memvault.db, loopback."""
    server = ServerProcess(memvault_command("serve", "--port", "0"), tmp_path)
    try:
        with memvault.open("http-remote", url=server.url) as vault:
            vault.retain(
                memvault.RetainRequest(workspace_id="w1", agent_id="a1", tier="AGENT", content="hi\n", mode="append")
            )
            name, _ = vault.provider.remote_capabilities()  # type: ignore[attr-defined]
    finally:
        assert server.stop() == 0
    assert name == "sqlite"
    assert (tmp_path / "memvault.db").is_file()


def test_unknown_key_in_the_server_table_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / "memvault.toml").write_text('provider = "memory"\n[server]\nprot = 1\n', encoding="utf-8")
    result = subprocess.run(
        memvault_command("serve"), capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False
    )
    assert result.returncode == 2
    assert "prot" in result.stderr


def test_token_new_prints_a_hashed_entry_that_the_service_accepts() -> None:
    """The secret goes to stderr only; stdout is a TOML entry holding its sha256."""
    result = CliRunner().invoke(token, ["new", "--name", "ci", "--workspace", "team-*", "--table", "server.tokens"])
    assert result.exit_code == 0, result.output
    secret = result.stderr.rsplit(": ", 1)[1].strip()
    assert secret not in result.stdout
    table = tomllib.loads(result.stdout)["server"]
    store = TokenStore(ServerSettings.from_table(table).tokens)
    entry = store.lookup(secret)
    assert entry is not None
    assert (entry.name, entry.workspaces, entry.sha256) == ("ci", ["team-*"], hash_token(secret))


def test_token_hash_prints_the_sha256_of_standard_input() -> None:
    result = CliRunner().invoke(token, ["hash"], input="s3cret\n")
    assert result.stdout.strip() == hash_token("s3cret")
