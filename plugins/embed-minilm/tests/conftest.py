from __future__ import annotations

from collections.abc import Iterator

import pytest

from memvault.registry import reset_registry
from memvault_embed_minilm import MiniLMEmbedder


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("MEMVAULT_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("MEMVAULT_DISABLE_PLUGINS", raising=False)
    reset_registry()
    yield
    reset_registry()


@pytest.fixture(scope="session")
def embedder() -> MiniLMEmbedder:
    """One embedder for the session: loading the model costs about a second."""
    return MiniLMEmbedder()
