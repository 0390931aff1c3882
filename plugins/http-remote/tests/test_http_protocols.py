"""Both HTTP parsers the service can run answer alike: h11 (where httptools does not install) and httptools.

The other service tests run whichever parser ``memvault serve`` picks in this
environment; these start uvicorn in process with each protocol class in turn.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import platform
import threading
from collections.abc import Iterator

import pytest
import uvicorn
from httpremote_support import raw_http

import memvault
from memvault_http_remote import server as server_module
from memvault_http_remote.app import create_app
from memvault_http_remote.settings import ServerSettings, TokenStore

PROTOCOLS = ["h11", "httptools"]


def _protocol(name: str) -> type[asyncio.Protocol]:
    if name == "h11":
        return server_module._TypedH11Protocol
    cls: type[asyncio.Protocol] | None = getattr(server_module, "_TypedHttpToolsProtocol", None)
    if cls is None:
        # A dependency on CPython: its absence there is a broken install, not a reason to skip.
        assert platform.python_implementation() != "CPython", "httptools is a dependency of memvault-http-remote"
        pytest.skip("httptools does not install on this interpreter")
    return cls


@pytest.fixture(params=PROTOCOLS)
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    protocol = _protocol(request.param)
    vault = memvault.open("memory")
    config = uvicorn.Config(
        create_app(vault, ServerSettings(port=0), TokenStore([])),
        host="127.0.0.1",
        port=0,
        http=protocol,
        loop="asyncio",
        log_level="warning",
        lifespan="off",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            threading.Event().wait(0.01)
        assert server.started
        yield server_module.bound_urls(server)[0]
    finally:
        server.should_exit = True
        thread.join(10)
        vault.close()


def test_the_default_is_httptools_exactly_when_it_is_installed() -> None:
    if importlib.util.find_spec("httptools") is None:
        assert server_module.http_protocol() is server_module._TypedH11Protocol
    else:
        assert server_module.http_protocol().__name__ == "_TypedHttpToolsProtocol"


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "9" * 30, "9" * 6000])
def test_a_malformed_request_gets_the_typed_400_body(url: str, length: str) -> None:
    request = (
        "POST /v1/recall HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\nConnection: close\r\n\r\n{{}}"
    ).encode()
    status, headers, body = raw_http(url, request)
    assert status == 400
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["type"] == "InvalidRequest"
    assert error["field"] in ("headers", "body")


def test_a_recall_is_answered_with_the_service_json(url: str) -> None:
    body = json.dumps({"workspace_id": "w-1", "agent_id": "a1", "query": "tea"})
    request = (
        f"POST /v1/recall HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
    ).encode()
    status, headers, answer = raw_http(url, request)
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert json.loads(answer)["hits"] == []
