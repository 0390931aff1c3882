"""An answer sent before its request's body has arrived ends the connection (a real `memvault serve`).

The service answers many requests without reading their bodies: 401, the gate's
503, 404, 405, 413 by the declared length (or part way through a chunked body),
health and capabilities. Before, uvicorn then kept such a connection open for as
long as the body trickled in, one byte a second sufficing: the head deadline had
ended with the head, uvicorn's keep-alive timer is cancelled by every read and
re-armed only after a next answer, and ``body_timeout`` bounded only the bodies
the service reads. A caller without a token could hold every file descriptor.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from httpremote_support import ServerProcess, memvault_command

from memvault_http_remote.settings import hash_token

BODY_TIMEOUT = 2.0
MAX_BODY = 4096
TOKEN = "early-token-000000"  # bound to workspace "early"
HOLDER = "holder-token-00000"  # its one slot (max_per_token = 1) is held by a stalled upload
HUGE = 100_000_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root: Path = tmp_path_factory.mktemp("early")
    tokens = "".join(
        f'[[server.tokens]]\nname = "{name}"\nsha256 = "{hash_token(secret)}"\nworkspaces = ["early"]\n'
        for name, secret in (("early", TOKEN), ("holder", HOLDER))
    )
    (root / "memvault.toml").write_text(
        f'provider = "sqlite"\n[providers.sqlite]\npath = "{root / "early.db"}"\n'
        f"[server]\nport = 0\nbody_timeout = {BODY_TIMEOUT}\nmax_body_bytes = {MAX_BODY}\nmax_per_token = 1\n{tokens}",
        encoding="utf-8",
    )
    proc = ServerProcess(memvault_command("--config", str(root / "memvault.toml"), "serve"), root)
    yield proc
    proc.stop()


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=10)


def _head(method: str, path: str, *headers: str) -> bytes:
    return "".join([f"{method} {path} HTTP/1.1\r\nHost: x\r\n", *(f"{h}\r\n" for h in headers), "\r\n"]).encode()


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of the one answer the service sends on ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "closed in the middle of the answer"
        body += chunk
    return int(lines[0].split(" ")[1]), headers, body


def _closed(sock: socket.socket) -> bool:
    """Whether the service has closed ``sock`` (its answer already read)."""
    sock.settimeout(0.05)
    try:
        return sock.recv(65536) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def _trickle(sockets: dict[str, socket.socket], trickled: dict[str, bytes], seconds: float) -> dict[str, float]:
    """Send each socket its next body byte every 0.1 s for up to ``seconds``: when each one was closed."""
    started = time.monotonic()
    closed: dict[str, float] = {}
    while len(closed) < len(sockets) and time.monotonic() - started < seconds:
        for name, sock in sockets.items():
            if name in closed:
                continue
            try:
                sock.sendall(trickled[name])
                if not _closed(sock):
                    continue
            except OSError:
                pass
            closed[name] = time.monotonic() - started
        time.sleep(0.1)
    return closed


def _early(path: str, status: int, method: str = "POST", *headers: str) -> tuple[bytes, int]:
    return _head(method, path, f"Content-Length: {HUGE}", *headers), status


#: name -> (the request head, declaring a body it never finishes; the answer expected at once)
EARLY = {
    "401 no token": _early("/v1/recall", 401),
    "401 unknown token": _early("/v1/retain", 401, "POST", "Authorization: Bearer not-a-token"),
    "200 health": _early("/v1/health", 200, "GET"),
    "401 health, bad token": _early("/v1/health", 401, "GET", "Authorization: Bearer not-a-token"),
    "404 unknown path": _early("/v1/nope", 404),
    "405 wrong method": _early("/v1/recall", 405, "GET", f"Authorization: Bearer {TOKEN}"),
    "200 capabilities": _early("/v1/capabilities", 200, "GET", f"Authorization: Bearer {TOKEN}"),
    "413 declared length": _early("/v1/recall", 413, "POST", f"Authorization: Bearer {TOKEN}"),
    "503 gate": _early("/v1/recall", 503, "POST", f"Authorization: Bearer {HOLDER}"),
}


def test_every_answer_sent_before_the_body_arrived_ends_the_connection_within_the_body_timeout(
    server: ServerProcess,
) -> None:
    """Each request gets its typed answer at once, with ``Connection: close``; then its body trickles,
    a byte every 0.1 s: the service closes every one of these connections within ``body_timeout``."""
    holder = _connect(server.url)  # holds HOLDER's one slot until its 408, for the 503 below
    holder.sendall(_head("POST", "/v1/recall", f"Authorization: Bearer {HOLDER}", "Content-Length: 1000") + b"{")
    time.sleep(0.3)
    sockets: dict[str, socket.socket] = {}
    trickled: dict[str, bytes] = {}
    answers: dict[str, tuple[int, str, str]] = {}
    try:
        for name, (head, _) in EARLY.items():
            sock = sockets[name] = _connect(server.url)
            sock.sendall(head)
            trickled[name] = b"x"
            status, headers, body = _answer(sock)
            answers[name] = (status, headers.get("connection", ""), json.loads(body).get("error", {}).get("type", ""))
        # A chunked body refused part way (413 once past max_body_bytes), then trickling inside a chunk.
        sock = sockets["413 chunked, part way"] = _connect(server.url)
        sock.sendall(_head("POST", "/v1/recall", f"Authorization: Bearer {TOKEN}", "Transfer-Encoding: chunked"))
        sock.sendall(f"{MAX_BODY + 1:x}\r\n".encode() + b"x" * (MAX_BODY + 1) + b"\r\n100000\r\n")
        trickled["413 chunked, part way"] = b"x"
        status, headers, body = _answer(sock)
        answers["413 chunked, part way"] = (status, headers.get("connection", ""), json.loads(body)["error"]["type"])
        assert {name: answer[0] for name, answer in answers.items()} == {
            **{name: status for name, (_, status) in EARLY.items()},
            "413 chunked, part way": 413,
        }
        closed = _trickle(sockets, trickled, BODY_TIMEOUT + 3)
    finally:
        holder.close()
        for sock in sockets.values():
            sock.close()
    still_open = sorted(set(sockets) - set(closed))
    assert not still_open, f"still open {BODY_TIMEOUT + 3:g} s after their answers, their bodies trickling"
    assert max(closed.values()) < BODY_TIMEOUT + 1.0, closed
    # Each answer said so, so no client sends a next request on a connection about to close.
    assert {name: connection for name, (_, connection, _) in answers.items()} == dict.fromkeys(answers, "close")


@pytest.mark.parametrize(
    ("token", "status", "kind"),
    [("not-a-token", 401, "Unauthorized"), (TOKEN, 413, "InvalidRequest")],
    ids=["401", "413"],
)
def test_a_client_still_writing_a_large_body_reads_the_answer_not_a_reset(
    server: ServerProcess, token: str, status: int, kind: str
) -> None:
    """The service reads and drops the rest of an answered body before it closes: a client busy
    writing 32 MiB (http.client, as the http-remote provider sends) gets the typed answer. Closing
    at once would reset it mid-write, and it would never see the 413 that makes it split a batch."""
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    try:
        conn.request(
            "POST",
            "/v1/retain",
            body=b"x" * (32 << 20),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    assert response.status == status
    assert response.getheader("connection") == "close"
    assert json.loads(body)["error"]["type"] == kind


def test_an_answer_after_the_whole_body_keeps_the_connection_alive(server: ServerProcess) -> None:
    """Requests whose bodies the service read are answered as before: no ``Connection: close``, and
    the next request goes over the same connection."""
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
    body = json.dumps({"workspace_id": "early", "agent_id": "a1", "query": "tea"})
    try:
        seen = []
        for _ in range(3):
            conn.request("POST", "/v1/recall", body=body, headers={"Authorization": f"Bearer {TOKEN}"})
            response = conn.getresponse()
            assert response.status == 200, response.read()
            assert response.getheader("connection") is None
            response.read()
            seen.append(conn.sock)
    finally:
        conn.close()
    assert seen[0] is not None
    assert seen == [seen[0]] * 3  # one connection for the three requests
