"""Fixtures: a configuration per test; one HTTP server subprocess per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_support import HttpServer, write_setup


@pytest.fixture
def setup(tmp_path: Path) -> Path:
    return write_setup(tmp_path)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    config = write_setup(tmp_path_factory.mktemp("http"))
    server = HttpServer(config)
    yield server
    server.stop()
