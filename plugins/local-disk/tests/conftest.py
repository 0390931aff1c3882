from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import memvault
from memvault.registry import reset_registry


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("MEMVAULT_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("MEMVAULT_DISABLE_PLUGINS", raising=False)
    # Recall by words only unless a test gives its vault an embedder (test_vectors.py): the installed
    # default embedder would otherwise embed in the background and add hits by meaning to every recall.
    monkeypatch.setenv("MEMVAULT_EMBEDDER", "off")
    reset_registry()
    yield
    reset_registry()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The memory root; not created yet (the provider creates it on the first write)."""
    return tmp_path / "memory"


@pytest.fixture
def vault(root: Path) -> Iterator[memvault.Vault]:
    with memvault.open("local-disk", root=str(root)) as v:
        yield v
