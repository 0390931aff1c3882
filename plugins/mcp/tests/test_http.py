"""`memvault mcp --transport http`: streamable HTTP behind the bearer tokens of `memvault serve`."""

from __future__ import annotations

import json
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from mcp_support import DANA_TOKEN, EVE_TOKEN, INJECTION, OTHER_TOKEN, HttpServer, run, text_of

from memvault_mcp.server import HEAD_TIMEOUT

WRITE = {"tier": "AGENT", "content": "Prefers metric units.\n", "mode": "append"}

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


@pytest.mark.parametrize("token", [None, "mvt_not-a-known-token"])
def test_http_without_a_valid_token_is_401(http_server: HttpServer, token: str | None) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    response = httpx2.post(http_server.url, json=INITIALIZE, headers=headers, timeout=10)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_http_lists_tools_and_round_trips_write_search_read(http_server: HttpServer) -> None:
    async def session() -> tuple[list[str], list[str]]:
        async with http_server.client(DANA_TOKEN) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            wrote = await client.call_tool("profile__write", WRITE)
            found = await client.call_tool("profile__search", {"q": "units"})
            read = await client.call_tool("profile__read", {"tier": "AGENT"})
            assert not (wrote.is_error)
            assert not (found.is_error)
            assert not (read.is_error)
            return names, [text_of(found), text_of(read)]

    names, (found, read) = run(session)
    assert {"profile__read", "profile__write", "profile__search", "notes__save", "team__search"} <= set(names)
    assert json.loads(found)["hits"][0]["snippet"] == "Prefers metric units."
    assert "Prefers metric units." in json.loads(read)["content"]


def test_http_refused_writes_are_tool_errors(http_server: HttpServer) -> None:
    async def session() -> list[tuple[bool, str]]:
        async with http_server.client(DANA_TOKEN) as client:
            scanned = await client.call_tool("profile__write", {"tier": "pins", "content": INJECTION, "mode": "append"})
            capped = await client.call_tool(
                "profile__write", {"tier": "PERSONA", "content": "x" * 1600, "mode": "replace"}
            )
            down = await client.call_tool("remote__read", {"tier": "AGENT"})
            fine = await client.call_tool("profile__read", {"tier": "pins"})
            return [(c.is_error, text_of(c)) for c in (scanned, capped, down, fine)]

    scanned, capped, down, fine = run(session)
    assert scanned[0]
    assert scanned[1].startswith("ContentRejected: ")
    assert capped[0]
    assert capped[1].startswith("CapExceeded: ")
    assert down[0]
    assert down[1].startswith(("UpstreamError: ", "UpstreamTimeout: "))
    assert not fine[0]
    assert json.loads(fine[1])["content"] == ""


def test_http_the_token_decides_whose_memory_a_call_reaches(http_server: HttpServer) -> None:
    secret = {"tier": "PERSONA", "content": "Dana's secret: allergic to penicillin.\n", "mode": "replace"}

    async def as_dana() -> None:
        async with http_server.client(DANA_TOKEN) as client:
            assert not (await client.call_tool("profile__write", secret)).is_error

    async def as_eve() -> tuple[str, str, str]:
        async with http_server.client(EVE_TOKEN) as client:
            found = await client.call_tool("profile__search", {"q": "penicillin allergic"})
            read = await client.call_tool("profile__read", {"tier": "PERSONA"})
            resource = (await client.read_resource("memvault://profile/PERSONA")).contents[0]
            return text_of(found), text_of(read), getattr(resource, "text", "")

    run(as_dana)
    found, read, resource = run(as_eve)
    assert json.loads(found)["hits"] == []
    assert json.loads(read)["content"] == ""
    assert "penicillin" not in resource


def test_http_a_token_bound_to_another_workspace_sees_no_slot(http_server: HttpServer) -> None:
    async def session() -> tuple[list[str], bool, str, list[str]]:
        async with http_server.client(OTHER_TOKEN) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            call = await client.call_tool("profile__read", {"tier": "AGENT"})
            resources = [str(r.uri) for r in (await client.list_resources()).resources]
            return names, call.is_error, text_of(call), resources

    names, is_error, message, resources = run(session)
    assert names == []
    assert is_error
    assert message.startswith("UnknownTool: ")
    assert resources == []


def test_http_resources_are_the_callers_own_documents(http_server: HttpServer) -> None:
    async def session() -> tuple[list[str], str]:
        async with http_server.client(DANA_TOKEN) as client:
            await client.call_tool("profile__write", {"tier": "AGENT", "content": "Call me Dee.\n", "mode": "append"})
            listed = [str(r.uri) for r in (await client.list_resources()).resources]
            pins = (await client.read_resource("memvault://profile/AGENT")).contents[0]
            return listed, getattr(pins, "text", "")

    listed, pins = run(session)
    assert "memvault://profile/AGENT" in listed
    assert "Call me Dee." in pins


def test_http_a_stateful_session_answers_only_the_token_that_opened_it(http_server: HttpServer) -> None:
    """A legacy (handshake) client gets an MCP session id; another token presenting it is not let in."""
    sent: list[Any] = []
    note = {"tier": "AGENT", "content": "Draft: quarterly numbers.\n", "mode": "append"}
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "scratch__read", "arguments": {"tier": "AGENT"}},
    }

    async def session() -> httpx2.Response:
        async with http_server.client(DANA_TOKEN, mode="legacy", sent=sent) as client:
            assert not (await client.call_tool("scratch__write", note)).is_error
            found = await client.call_tool("scratch__search", {"q": "quarterly"})
            assert json.loads(text_of(found))["hits"]  # the same session: its memory is there
            opened = next(r for r in sent if "mcp-session-id" in r.headers)
            headers = {
                "Authorization": f"Bearer {EVE_TOKEN}",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
                "Mcp-Session-Id": opened.headers["mcp-session-id"],
                "Mcp-Protocol-Version": opened.headers.get("mcp-protocol-version", "2025-06-18"),
            }
            async with httpx2.AsyncClient(timeout=10) as other:  # while Dana's session is still open
                return await other.post(http_server.url, json=call, headers=headers)

    response = run(session)
    assert response.status_code == 404
    assert "quarterly" not in response.text


def _raw(url: str, head: bytes, more: bytes = b"", repeat: int = 0) -> tuple[bytes, float]:
    """Send ``head`` (then ``more`` ``repeat`` times) and read until the server closes; the answer and when."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=20) as sock:
        started = time.monotonic()
        sock.sendall(head)
        try:
            for _ in range(repeat):
                sock.sendall(more)
        except OSError:  # the server closed the connection while we were still sending
            pass
        data = b""
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except OSError:
            pass
        return data, time.monotonic() - started


def test_http_a_stalled_request_head_is_closed_with_a_408(http_server: HttpServer) -> None:
    data, took = _raw(http_server.url, b"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthoriz")
    assert data.startswith(b"HTTP/1.1 408")
    assert HEAD_TIMEOUT - 0.5 < took < HEAD_TIMEOUT + 5


def test_http_an_endless_request_head_is_refused_before_it_fills_memory(http_server: HttpServer) -> None:
    data, _ = _raw(http_server.url, b"POST /mcp HTTP/1.1\r\nHost: x\r\nX-Long: ", b"a" * 4096, repeat=2048)
    assert data.startswith(b"HTTP/1.1 400")
