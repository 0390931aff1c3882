"""Fixtures: one real ``memvault serve`` subprocess for the session, and a fresh registry per test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from httpremote_support import ServerProcess, backing_provider, memvault_command, write_config
from hypothesis import settings as hypothesis_settings

from memvault.registry import reset_registry

hypothesis_settings.register_profile("ci", max_examples=60, deadline=None)
hypothesis_settings.register_profile("dev", max_examples=30, deadline=None)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real `memvault serve` for the session: 127.0.0.1, a free port, tokens, sqlite behind."""
    reset_registry()
    root = tmp_path_factory.mktemp("served")
    config = write_config(root, backing_provider())
    server = ServerProcess(memvault_command("--config", str(config), "serve"), root)
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("MEMVAULT_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("MEMVAULT_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("MEMVAULT_PROVIDER", raising=False)
    monkeypatch.delenv("MEMVAULT_CONFIG", raising=False)
    yield
    reset_registry()
