from __future__ import annotations

from collections.abc import Iterator

import pytest

from memvault.registry import reset_registry
from memvault_scan_multilingual import E5Engine


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("MEMVAULT_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("MEMVAULT_DISABLE_PLUGINS", raising=False)
    reset_registry()
    yield
    reset_registry()


@pytest.fixture(scope="session")
def engine() -> E5Engine:
    """One engine for the session: loading it checks the 71 MB of weights."""
    return E5Engine()
