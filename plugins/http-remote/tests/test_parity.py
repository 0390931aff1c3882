"""The whole parity suite, for `http-remote` against a real `memvault serve` with sqlite behind it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from httpremote_support import PARITY_TOKEN, ServerProcess, memvault_command, write_config

import memvault
from memvault.contract.models import Capability
from memvault_http_remote.plugin import CAPABILITIES
from memvault_parity import ProviderSuite


class TestHttpRemoteParity(ProviderSuite):
    provider = "http-remote"
    strict = True  # our own provider: every contract line up to the newest fails it
    #: What the client registers, plus ``durable``: the server here stores in sqlite, so an
    #: acknowledged retain survives the client's death (the suite's P11 tests) and the
    #: server's (``test_acknowledged_writes_survive_kill_9_of_the_server`` below).
    capabilities = CAPABILITIES | {Capability.DURABLE}

    @pytest.fixture
    def settings(self, served: ServerProcess) -> dict[str, Any]:
        """The session server; every test uses its own `parity-*` workspace, which the token may touch."""
        return {"url": served.url, "token": PARITY_TOKEN, "timeout": 10.0}

    def test_the_session_server_serves_sqlite(self, vault: memvault.Vault) -> None:
        """The parity run goes through the service to sqlite, not to an in-process store."""
        name, capabilities = vault.provider.remote_capabilities()  # type: ignore[attr-defined]
        assert name == "sqlite"
        assert {Capability.CASCADE_FORGET, Capability.QUARANTINE} <= capabilities

    def test_the_suite_reads_that_the_session_server_recalls_by_words(self, vault: memvault.Vault) -> None:
        """Its config turns the embedder off, so ``find`` returns every hit, as by words (test_parity_by_meaning.py
        runs the suite against a service recalling by meaning)."""
        assert self.recall_embedder(vault) is None

    def test_acknowledged_writes_survive_kill_9_of_the_server(self, tmp_path: Path) -> None:
        """P11 over the wire: writes acknowledged before the server is SIGKILLed are there after a restart."""
        config = write_config(tmp_path, "sqlite")
        first = ServerProcess(memvault_command("--config", str(config), "serve"), tmp_path)
        try:
            with memvault.open("http-remote", url=first.url, token=PARITY_TOKEN) as vault:
                for i in range(10):
                    self.put(vault, "parity-crash", f"entry {i}\n", tier="peers", key=f"d{i}", mode="replace")
        finally:
            first.proc.kill()
            first.proc.wait(10)
        second = ServerProcess(memvault_command("--config", str(config), "serve"), tmp_path)
        try:
            with memvault.open("http-remote", url=second.url, token=PARITY_TOKEN) as vault:
                bodies = [self.body(vault, "parity-crash", tier="peers", key=f"d{i}") for i in range(10)]
        finally:
            assert second.stop() == 0
        assert bodies == [f"entry {i}\n" for i in range(10)]


def test_memvault_parity_command_runs_against_a_server(served: ServerProcess) -> None:
    """`memvault parity http-remote --option url=... --option token=...` works with no scratch settings."""
    result = subprocess.run(
        memvault_command(
            "parity",
            "http-remote",
            "--option",
            f"url={served.url}",
            "--option",
            f"token={PARITY_TOKEN}",
            "-k",
            "health",
        ),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
