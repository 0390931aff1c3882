"""`memvault mcp --transport http` as hostile tenants meet it: a real server on 127.0.0.1, bounded loops.

The MCP twin of plugins/http-remote/tests/test_adversarial.py (#33, items 4-6):
one token opening sessions without end, one tenant's calls to a slot whose
provider never answers, bodies that trickle or stall, callers that leave
mid-body. The server runs with small limits (``[http]`` of its configuration),
so each scenario takes seconds; the other tenant must be served throughout.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from mcp_support import DANA_TOKEN, EVE_TOKEN, OTHER_TOKEN, HttpServer, write_setup

BODY_TIMEOUT = 2.0
REQUEST_TIMEOUT = 1.5
MAX_PER_TOKEN = 8
MAX_PER_SLOT = 4
SESSIONS_PER_TOKEN = 4
IDLE_TIMEOUT = 2.0
MODERN = "2026-07-28"


class _Silent:
    """A TCP server on 127.0.0.1 that accepts connections and never answers: a hung provider."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port: int = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.held.append(conn)

    def close(self) -> None:
        self.stopped.set()
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.fixture(scope="module")
def silent() -> Iterator[_Silent]:
    server = _Silent()
    yield server
    server.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, silent: _Silent) -> Iterator[HttpServer]:
    root: Path = tmp_path_factory.mktemp("mcp-adversarial")
    config = write_setup(root)
    text = config.read_text(encoding="utf-8")
    head, slots = text.split("[[slots]]", 1)
    config.write_text(
        head + f"[http]\nbody_timeout = {BODY_TIMEOUT}\nrequest_timeout = {REQUEST_TIMEOUT}\nmax_concurrent = 32\n"
        f"max_per_token = {MAX_PER_TOKEN}\nmax_unauthenticated = 4\nmax_per_slot = {MAX_PER_SLOT}\n"
        f"max_sessions_per_token = {SESSIONS_PER_TOKEN}\nsession_idle_timeout = {IDLE_TIMEOUT}\n\n[[slots]]"
        + slots
        + f'\n[[slots]]\nname = "hung"\ndescription = "A memory service that never answers."\n'
        f'provider = "http-remote"\noptions = {{ url = "http://127.0.0.1:{silent.port}", timeout = 8 }}\n',
        encoding="utf-8",
    )
    proc = HttpServer(config)
    yield proc
    proc.stop()


def _headers(token: str, **extra: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        **extra,
    }


def _initialize(http: httpx2.Client, url: str, token: str) -> httpx2.Response:
    """A client's opening request of a stateful session (the 2025 handshake), and nothing after it."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    return http.post(url, json=body, headers=_headers(token))


def _call(http: httpx2.Client, url: str, token: str, tool: str, arguments: dict[str, Any]) -> httpx2.Response:
    """One stateless tool call (the 2026 protocol: no session)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta},
    }
    headers = _headers(token, **{"Mcp-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": tool})
    return http.post(url, json=body, headers=headers)


def _result(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC result of an answer sent as JSON or as one server-sent event."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and '"result"' in line)
    result: dict[str, Any] = json.loads(text)["result"]
    return result


def _tool_text(response: httpx2.Response) -> tuple[bool, str]:
    result = _result(response)
    return bool(result.get("isError")), "".join(block.get("text", "") for block in result["content"])


def _fds(server: HttpServer) -> int:
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


def _connect(url: str, head: bytes) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=BODY_TIMEOUT + 8)
    sock.sendall(head)
    return sock


def _stalled_head(url: str, token: str, length: int = 1000) -> bytes:
    parts = urlsplit(url)
    return (
        f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Length: {length}\r\n\r\n{{"
    ).encode()


def _status_of(sock: socket.socket, deadline: float) -> int:
    """The status the server answered on ``sock`` by ``deadline`` (0: none, or the connection reset)."""
    try:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = sock.recv(4096)
    except OSError:
        return 0
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0


# -- 4. sessions ---------------------------------------------------------------------------------


def test_one_token_cannot_hold_more_than_its_sessions_and_another_tenant_still_initializes(
    server: HttpServer,
) -> None:
    """Before: the SDK's only bound was 10,000 sessions in total, idle for 30 minutes; one token opened
    them all and every other tenant's initialize got 503. Now the token's 5th session is a 429 naming
    http.max_sessions_per_token, the other tenant opens its own at once, and an idle session expires."""
    with httpx2.Client(timeout=10) as http:
        answers = [_initialize(http, server.url, DANA_TOKEN) for _ in range(3 * SESSIONS_PER_TOKEN)]
        started = time.monotonic()
        other = _initialize(http, server.url, EVE_TOKEN)
        other_took = time.monotonic() - started
        statuses = [a.status_code for a in answers]
        assert statuses[:SESSIONS_PER_TOKEN] == [200] * SESSIONS_PER_TOKEN
        assert all("mcp-session-id" in a.headers for a in answers[:SESSIONS_PER_TOKEN])
        assert statuses[SESSIONS_PER_TOKEN:] == [429] * (2 * SESSIONS_PER_TOKEN), statuses
        refusal = answers[-1].json()["error"]["message"]
        assert "http.max_sessions_per_token" in refusal
        assert "http.session_idle_timeout" in refusal
        assert other.status_code == 200, other.text
        assert "mcp-session-id" in other.headers
        assert other_took < 1.0
        time.sleep(IDLE_TIMEOUT + 1.5)  # every session opened above is idle past its timeout: closed
        again = [_initialize(http, server.url, DANA_TOKEN) for _ in range(SESSIONS_PER_TOKEN)]
        assert [a.status_code for a in again] == [200] * SESSIONS_PER_TOKEN
        old = answers[0].headers["mcp-session-id"]
        gone = http.post(
            server.url,
            json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
            headers=_headers(DANA_TOKEN, **{"Mcp-Session-Id": old, "Mcp-Protocol-Version": "2025-11-25"}),
        )
        assert gone.status_code == 404  # expired: the client opens a new session
        for answer in again:  # and these end as a client ends them, freeing the token's share at once
            sid = answer.headers["mcp-session-id"]
            http.delete(server.url, headers=_headers(DANA_TOKEN, **{"Mcp-Session-Id": sid}))
        assert _initialize(http, server.url, DANA_TOKEN).status_code == 200


# -- 5. a slot whose provider never answers ----------------------------------------------------------


def test_calls_to_a_hung_slot_cannot_stall_another_tenants_call_to_a_healthy_slot(server: HttpServer) -> None:
    """48 concurrent calls to a slot whose provider never answers. Before: they took every thread of the
    one shared pool (40) and another tenant's call to a healthy sqlite slot waited for them. Now the
    token's bound (503), the slot's bound (a tool error) and the deadline (an UpstreamTimeout tool error
    after request_timeout) hold them, and the other tenant's calls answer at once."""
    with httpx2.Client(timeout=10) as http:
        assert not _tool_text(
            _call(
                http,
                server.url,
                EVE_TOKEN,
                "profile__write",
                {"tier": "AGENT", "content": "Eve likes tea.\n", "mode": "append"},
            )
        )[0]
        _call(http, server.url, EVE_TOKEN, "profile__search", {"q": "tea"})  # warm: the first search costs ~2 s
    hung: list[httpx2.Response | Exception] = []

    def hang() -> None:
        with httpx2.Client(timeout=REQUEST_TIMEOUT + 8) as http:
            try:
                hung.append(_call(http, server.url, DANA_TOKEN, "hung__search", {"q": "anything"}))
            except httpx2.HTTPError as exc:
                hung.append(exc)

    took: list[float] = []
    with ThreadPoolExecutor(48) as pool:
        for _ in range(48):
            pool.submit(hang)
        time.sleep(0.5)  # the hung calls have reached the server
        with httpx2.Client(timeout=5) as http:
            for _ in range(3):
                started = time.monotonic()
                answer = _call(http, server.url, EVE_TOKEN, "profile__search", {"q": "tea"})
                took.append(time.monotonic() - started)
                failed, text = _tool_text(answer)
                assert not failed, text
                assert "Eve likes tea" in text
    assert max(took) < 1.0, took
    assert not [h for h in hung if isinstance(h, Exception)], hung
    statuses = [h.status_code for h in hung if isinstance(h, httpx2.Response)]
    refused = [h for h in hung if isinstance(h, httpx2.Response) and h.status_code == 503]
    assert len(refused) == statuses.count(503) == len(statuses) - statuses.count(200)
    assert all("http.max_per_token" in r.json()["error"]["message"] for r in refused)
    answered = [_tool_text(h) for h in hung if isinstance(h, httpx2.Response) and h.status_code == 200]
    assert answered
    assert all(failed for failed, _ in answered)
    timeouts = [text for _, text in answered if text.startswith("UpstreamTimeout:")]
    busy = [text for _, text in answered if text.startswith("UpstreamError:") and "http.max_per_slot" in text]
    assert len(timeouts) == MAX_PER_SLOT, answered
    assert "http.request_timeout" in timeouts[0]
    assert len(busy) == len(answered) - MAX_PER_SLOT


# -- 6. bodies -----------------------------------------------------------------------------------


def test_a_body_trickled_a_byte_at_a_time_ends_with_a_typed_408_after_the_body_timeout(server: HttpServer) -> None:
    """Before: an authenticated body sent one byte at a time was never closed."""
    sock = _connect(server.url, _stalled_head(server.url, OTHER_TOKEN))
    started = time.monotonic()
    data = b""
    try:
        sock.settimeout(0.25)
        while time.monotonic() - started < BODY_TIMEOUT + 4:
            try:
                sock.sendall(b" ")
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    took = time.monotonic() - started
    assert data.startswith(b"HTTP/1.1 408"), data[:200]
    assert took < BODY_TIMEOUT + 2
    error = json.loads(data.partition(b"\r\n\r\n")[2])["error"]
    assert error["type"] == "InvalidRequest"
    assert "http.body_timeout" in error["message"]


def test_200_stalled_bodies_cannot_stall_another_tenant_and_their_descriptors_come_back(server: HttpServer) -> None:
    """Before: 9,000 stalled requests stayed open (and 20,200 took every descriptor). Now those past the
    token's bound are refused at once (503), the rest end with 408 after body_timeout, the other tenant is
    served meanwhile, and the server's descriptors come back."""
    if not os.path.isdir(f"/proc/{server.proc.pid}/fd"):
        pytest.skip("counts the server's descriptors in /proc (Linux)")
    before = _fds(server)
    attackers = [_connect(server.url, _stalled_head(server.url, OTHER_TOKEN)) for _ in range(200)]
    try:
        time.sleep(0.5)
        during = _fds(server)
        with httpx2.Client(timeout=5) as http:
            for _ in range(3):
                started = time.monotonic()
                answer = _call(http, server.url, EVE_TOKEN, "profile__search", {"q": "tea"})
                assert answer.status_code == 200, answer.text
                assert time.monotonic() - started < 1.0
        deadline = time.monotonic() + BODY_TIMEOUT + 3
        statuses = [_status_of(sock, deadline) for sock in attackers]
    finally:
        for sock in attackers:
            sock.close()
    time.sleep(1.0)
    after = _fds(server)
    assert during >= before + 150  # they were open
    assert statuses.count(503) >= 200 - MAX_PER_TOKEN
    assert set(statuses) <= {503, 408}, statuses
    assert statuses.count(408) >= 1
    assert after <= before + 10, (before, during, after)


def test_a_client_leaving_mid_body_is_one_log_line_not_a_traceback(server: HttpServer) -> None:
    """Before: each abandoned request logged a 3 KB ERROR traceback (ClientDisconnect)."""
    seen = len(server.stderr)
    for _ in range(3):
        sock = _connect(server.url, _stalled_head(server.url, OTHER_TOKEN))
        time.sleep(0.2)
        sock.close()
    time.sleep(0.5)
    logged = "\n".join(server.stderr[seen:])
    assert "Traceback" not in logged
    assert "ClientDisconnect" not in logged
    assert "ERROR" not in logged
