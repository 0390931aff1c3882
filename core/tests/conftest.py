from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

import memvault
from memvault.registry import reset_registry

settings.register_profile("ci", max_examples=60, deadline=None)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test discovers plugins afresh, under its own environment."""
    monkeypatch.delenv("MEMVAULT_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("MEMVAULT_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("MEMVAULT_PROVIDER", raising=False)
    monkeypatch.delenv("MEMVAULT_CONFIG", raising=False)
    reset_registry()
    yield
    reset_registry()


@pytest.fixture
def vault() -> Iterator[memvault.Vault]:
    with memvault.open("memory") as v:
        yield v
