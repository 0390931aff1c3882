"""A real PostgreSQL server for the whole test session (no mocks): see ``memvault_postgres.testing``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

import memvault
from memvault.registry import reset_registry
from memvault_postgres import DSN_ENV
from memvault_postgres.testing import TemporaryCluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[TemporaryCluster]:
    """One throwaway cluster per session, stopped and deleted at the end, also when tests failed."""
    with TemporaryCluster() as server:
        previous = os.environ.get(DSN_ENV)
        # The scratch settings (and child processes the suite starts) find the server here.
        os.environ[DSN_ENV] = server.dsn()
        try:
            yield server
        finally:
            if previous is None:
                os.environ.pop(DSN_ENV, None)
            else:
                os.environ[DSN_ENV] = previous


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch, cluster: TemporaryCluster) -> Iterator[None]:
    monkeypatch.delenv("MEMVAULT_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("MEMVAULT_DISABLE_PLUGINS", raising=False)
    # Recall by words only unless a test gives its vault an embedder (test_vectors.py): the installed
    # default embedder would otherwise embed in the background and add hits by meaning to every recall.
    monkeypatch.setenv("MEMVAULT_EMBEDDER", "off")
    reset_registry()
    yield
    reset_registry()


@pytest.fixture
def schema_name() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


@pytest.fixture
def vault(cluster: TemporaryCluster, schema_name: str) -> Iterator[memvault.Vault]:
    with memvault.open("postgres", dsn=cluster.dsn(), schema=schema_name, scanner="off") as v:
        yield v
