"""Both HTTP parsers the service can run answer alike: h11 (where httptools does not install) and httptools.

The other service tests run whichever parser ``memvault serve`` picks in this
environment; these start uvicorn in process with each protocol class in turn.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import platform
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

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


def _serve(protocol: type[asyncio.Protocol]) -> Iterator[str]:
    """uvicorn in a thread on the service's app (memory provider), with ``protocol``; its URL."""
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


@pytest.fixture(params=PROTOCOLS)
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _serve(_protocol(request.param))


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


def _flood(url: str, opening: bytes, unit: bytes, total: int) -> tuple[int, bytes, int]:
    """Send ``opening`` then ``unit`` repeatedly (up to ``total`` bytes) without ever ending the head.

    Returns the status and body the service answered with, and how many bytes it
    took before it closed the connection (``total`` when it never did).
    """
    parts = urlsplit(url)
    sent = 0
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=10) as sock:
        sock.sendall(opening)
        try:
            while sent < total:
                sock.sendall(unit)
                sent += len(unit)
        except OSError:  # reset or broken pipe: the service closed the connection
            pass
        sock.settimeout(10)
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except OSError:
            pass
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
    return status, body, sent


@pytest.mark.parametrize(
    ("opening", "unit"),
    [
        (b"POST /v1/recall HTTP/1.1\r\nHost: x\r\nX-Long: ", b"a" * 4096),  # one endless header value
        (b"POST /v1/recall HTTP/1.1\r\nHost: x\r\n", b"X-Many: 1\r\n" * 400),  # endless small headers
        (b"GET /v1/", b"a" * 4096),  # an endless request target
    ],
    ids=["long-header", "many-headers", "long-url"],
)
def test_an_endless_request_head_is_refused_with_the_typed_400_before_it_fills_memory(
    url: str, opening: bytes, unit: bytes
) -> None:
    # 8 MiB offered; both parsers must stop reading well before (h11 at its 16 KiB bound,
    # httptools at the service's own), answer with the typed body and close.
    status, body, sent = _flood(url, opening, unit, 8 << 20)
    assert status == 400
    error = json.loads(body)["error"]
    assert error["type"] == "InvalidRequest"
    assert error["field"] == "headers"
    assert sent < 8 << 20, "the service kept reading an endless request head"


@pytest.fixture(params=PROTOCOLS)
def quick_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A service whose request heads must arrive within 0.5 s."""
    yield from _serve(type("_Quick", (_protocol(request.param),), {"head_timeout": 0.5}))


def _recall_request(close: bool) -> bytes:
    body = json.dumps({"workspace_id": "w-1", "agent_id": "a1", "query": "tea"})
    return (
        f"POST /v1/recall HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{'Connection: close' if close else 'X-Keep: 1'}\r\n\r\n{body}"
    ).encode()


def test_a_stalled_request_head_gets_the_typed_408_from_either_parser(quick_url: str) -> None:
    parts = urlsplit(quick_url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(b"POST /v1/recall HTTP/1.1\r\nHost: x\r\nContent-Le")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        took = time.monotonic() - started
    assert 0.3 < took < 5
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(body)["error"]["field"] == "headers"


def test_the_head_deadline_spares_idle_keep_alive_and_pipelined_requests(quick_url: str) -> None:
    parts = urlsplit(quick_url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=10) as sock:

        def answers(count: int) -> list[bytes]:
            data = b""
            while data.count(b"HTTP/1.1 ") < count or not data.endswith(b"}"):
                chunk = sock.recv(65536)
                assert chunk, f"closed after {data!r}"
                data += chunk
            return [b"HTTP/1.1 " + part for part in data.split(b"HTTP/1.1 ")[1:]]

        sock.sendall(_recall_request(close=False))
        assert answers(1)[0].startswith(b"HTTP/1.1 200")
        time.sleep(1.0)  # idle for twice the head deadline, within uvicorn's 5 s keep-alive
        sock.sendall(_recall_request(close=False) + _recall_request(close=False))  # two, pipelined
        assert [a[:12] for a in answers(2)] == [b"HTTP/1.1 200"] * 2


def test_an_answer_before_the_body_ends_the_connection_with_either_parser(quick_url: str) -> None:
    """404 at once for a body declared 100 MB; the body then trickles: either parser's connection
    says ``Connection: close`` and is closed within the deadline (0.5 s here), not kept for ever."""
    parts = urlsplit(quick_url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=10) as sock:
        sock.sendall(b"POST /v1/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n{")
        data = b""
        while not data.endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, f"closed before the answer: {data!r}"
            data += chunk
        answered = time.monotonic()
        sock.settimeout(0.05)
        closed_after = None
        while time.monotonic() - answered < 5:
            try:
                sock.sendall(b"x")
                if sock.recv(65536) == b"":
                    closed_after = time.monotonic() - answered
                    break
            except TimeoutError:
                pass
            except OSError:
                closed_after = time.monotonic() - answered
                break
            time.sleep(0.05)
    head = data.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 404")
    assert closed_after is not None, "the connection stayed open while its body trickled"
    assert closed_after < 2.0
    assert b"\r\nconnection: close" in head


def test_a_client_writing_a_large_body_reads_the_early_answer_with_either_parser(url: str) -> None:
    """The rest of an answered body is read and dropped before the connection closes: http.client,
    still writing 16 MiB, then reads the typed 404 (no reset)."""
    import http.client

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    try:
        conn.request("POST", "/v1/nope", body=b"x" * (16 << 20))
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert response.status == 404
    assert response.getheader("connection") == "close"
    assert json.loads(body)["error"]["type"] == "InvalidRequest"
