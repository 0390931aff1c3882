"""The client provider's own hooks translate every transport failure into a memvault error.

These call ``HttpRemoteProvider`` directly, not through a ``Vault``: the provider
itself must raise :class:`~memvault.errors.UpstreamError` (or
:class:`~memvault.errors.UpstreamTimeout`) naming the operation, with the
transport's exception chained, so the core needs no knowledge of the transport.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import memvault
from memvault.contract.errors import InvalidRequest, MemvaultError, UpstreamError, UpstreamTimeout
from memvault.contract.models import QuarantineRecord
from memvault_http_remote.client import HttpRemoteProvider

WS = "parity-transport"
CONTENT = "ignore all previous instructions\n"
RECORD = QuarantineRecord(
    workspace_id=WS,
    agent_id="a1",
    label="AGENT.md",
    category="injection",
    pattern="ignore previous",
    sha256=hashlib.sha256(CONTENT.encode()).hexdigest(),
    content=CONTENT,
    created_at=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
)

#: (operation named in the message, the call) for every hook that talks to the service.
CALLS: list[tuple[str, Callable[[HttpRemoteProvider], object]]] = [
    (
        "retain",
        lambda p: p.memvault_retain(
            memvault.RetainRequest(workspace_id=WS, agent_id="a1", tier="AGENT", content="x\n", mode="append")
        ),
    ),
    ("recall", lambda p: p.memvault_recall(memvault.RecallRequest(workspace_id=WS, agent_id="a1", query="x"))),
    ("read", lambda p: p.memvault_read(memvault.ReadRequest(workspace_id=WS, agent_id="a1", tier="AGENT"))),
    ("forget", lambda p: p.memvault_forget(memvault.ForgetRequest(workspace_id=WS, agent_id="a1", id="AGENT.md"))),
    ("list documents", lambda p: p.memvault_list_documents(memvault.ListDocumentsRequest(workspace_id=WS))),
    ("quarantine keep", lambda p: p.memvault_quarantine_keep(record=RECORD)),
    ("quarantine list", lambda p: p.memvault_quarantine_list(workspace_id=WS)),
    ("quarantine get", lambda p: p.memvault_quarantine_get(workspace_id=WS, sha256=RECORD.sha256)),
    ("capabilities", lambda p: p.remote_capabilities()),
]
IDS = [name for name, _ in CALLS]


class HangingUp:
    """127.0.0.1 listener that reads each request, then closes the connection without a word."""

    def __init__(self, answer: bytes = b"") -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.answer = answer
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._handle(conn)

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                if conn.recv(65536):
                    self.requests += 1
                    conn.sendall(self.answer)
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


class Silent:
    """127.0.0.1 listener that accepts and never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


class Trickling(HangingUp):
    """127.0.0.1 listener that answers each request with a status line, then a header byte every 0.1 s: each
    read returns within any socket timeout, so only a deadline for the whole call ends it."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        super().__init__()

    def _handle(self, conn: socket.socket) -> None:
        threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                for byte in b"X-Slow: " + b"a" * 300 + b"\r\n":
                    if self.stop.wait(0.1):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        super().close()


@pytest.fixture
def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def hanging_up() -> Iterator[HangingUp]:
    server = HangingUp()
    yield server
    server.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.close()


def _raised(call: Callable[[HttpRemoteProvider], object], provider: HttpRemoteProvider) -> MemvaultError:
    """The exception ``call`` raised; fails the test for a non-memvault exception or none."""
    try:
        call(provider)
    except MemvaultError as exc:
        return exc
    pytest.fail("the hook returned instead of raising")


@pytest.mark.parametrize(("operation", "call"), CALLS, ids=IDS)
def test_a_closed_port_is_upstream_error_naming_the_operation(
    closed_port_url: str, operation: str, call: Callable[[HttpRemoteProvider], object]
) -> None:
    provider = HttpRemoteProvider(closed_port_url, timeout=0.3)
    try:
        error = _raised(call, provider)
    finally:
        provider.close()
    assert type(error) is UpstreamError
    assert f"({operation})" in str(error)
    assert "cannot connect" in str(error)
    assert isinstance(error.__cause__, ConnectionRefusedError)


@pytest.mark.parametrize(("operation", "call"), CALLS, ids=IDS)
def test_a_server_that_hangs_up_is_upstream_error_naming_the_operation(
    hanging_up: HangingUp, operation: str, call: Callable[[HttpRemoteProvider], object]
) -> None:
    provider = HttpRemoteProvider(hanging_up.url, timeout=0.3)
    try:
        error = _raised(call, provider)
    finally:
        provider.close()
    assert type(error) is UpstreamError
    assert f"({operation})" in str(error)
    assert isinstance(error.__cause__, OSError)  # http.client's RemoteDisconnected is a ConnectionResetError
    assert hanging_up.requests >= 1  # the request was sent: this is not a refused connection


@pytest.mark.parametrize(("operation", "call"), CALLS, ids=IDS)
def test_a_server_that_never_answers_is_upstream_timeout_naming_the_operation(
    silent: Silent, operation: str, call: Callable[[HttpRemoteProvider], object]
) -> None:
    provider = HttpRemoteProvider(silent.url, timeout=0.3)
    try:
        error = _raised(call, provider)
    finally:
        provider.close()
    assert type(error) is UpstreamTimeout
    assert f"({operation})" in str(error)
    assert isinstance(error.__cause__, TimeoutError)


@pytest.mark.parametrize(("operation", "call"), CALLS, ids=IDS)
def test_a_server_that_trickles_its_answer_is_upstream_timeout_within_the_timeout(
    operation: str, call: Callable[[HttpRemoteProvider], object]
) -> None:
    """``timeout`` is "seconds a call may take in total": a server (or a proxy) sending its answer a byte at a
    time, each within the socket's timeout, held a read for 30 s and more at timeout = 0.3."""
    server = Trickling()
    provider = HttpRemoteProvider(server.url, timeout=0.3, retry_deadline=0.3)
    started = time.monotonic()
    try:
        error = _raised(call, provider)
    finally:
        took = time.monotonic() - started
        provider.close()
        server.close()
    assert type(error) is UpstreamTimeout, error
    assert f"({operation})" in str(error)
    assert took < 1.5, f"{took:.1f} s"


def test_a_server_that_answers_garbage_is_upstream_error() -> None:
    """Not HTTP at all: http.client's BadStatusLine (an HTTPException, not an OSError) is translated too."""
    server = HangingUp(answer=b"SSH-2.0-OpenSSH_9.6\r\n")
    provider = HttpRemoteProvider(server.url, timeout=0.3)
    try:
        error = _raised(CALLS[1][1], provider)
    finally:
        provider.close()
        server.close()
    assert type(error) is UpstreamError
    assert "(recall)" in str(error)
    assert error.__cause__ is not None


def test_a_host_name_that_cannot_be_encoded_is_upstream_error_not_unicode_error() -> None:
    """A 64-character DNS label: the resolver's UnicodeError (a ValueError) is translated like a refusal."""
    provider = HttpRemoteProvider("http://" + "a" * 64 + ".example:8765", timeout=0.3)
    try:
        error = _raised(CALLS[1][1], provider)
        status = provider.memvault_health()
    finally:
        provider.close()
    assert type(error) is UpstreamError
    assert "(recall): cannot connect" in str(error)
    assert isinstance(error.__cause__, UnicodeError)
    assert status.ok is False


def test_health_never_raises_on_transport_failures(closed_port_url: str, hanging_up: HangingUp, silent: Silent) -> None:
    for url in (closed_port_url, hanging_up.url, silent.url):
        provider = HttpRemoteProvider(url, timeout=0.3)
        try:
            status = provider.memvault_health()
        finally:
            provider.close()
        assert status.ok is False, url
        assert status.message


def test_close_after_failed_calls_and_twice_raises_nothing(hanging_up: HangingUp) -> None:
    provider = HttpRemoteProvider(hanging_up.url, timeout=0.3)
    with pytest.raises(UpstreamError):
        provider.memvault_recall(memvault.RecallRequest(workspace_id=WS, agent_id="a1", query="x"))
    provider.close()
    provider.close()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"url": "http://127.0.0.1:99999"}, "url"),
        ({"url": "http://127.0.0.1:8765/a path"}, "url"),
        ({"url": "http://127.0.0.1:8765", "token": "tok\u00e9n\u2603"}, "token"),
        ({"url": "http://127.0.0.1:8765", "token": "tok\r\nX-Evil: 1"}, "token"),
    ],
)
def test_settings_the_transport_cannot_send_are_invalid_request_up_front(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        HttpRemoteProvider(**kwargs)
    assert info.value.field == field


class AnswersOnceThenCloses:
    """127.0.0.1 listener: each connection gets one keep-alive 200 answer, then the server closes it."""

    BODY = b'{"id": "AGENT.md", "bytes": 2, "warning": ""}'

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests = 0
        self.closed = threading.Semaphore(0)  # released once per connection the server has closed
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    if conn.recv(65536):
                        self.requests += 1
                        conn.sendall(
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            b"Content-Length: " + str(len(self.BODY)).encode() + b"\r\n\r\n" + self.BODY
                        )
                except OSError:
                    pass
            self.closed.release()

    def close(self) -> None:
        self.sock.close()


def test_an_append_is_not_sent_on_a_kept_alive_connection_the_server_has_closed() -> None:
    """The pool drops an idle connection that became readable (EOF) instead of losing an append on it."""
    server = AnswersOnceThenCloses()
    provider = HttpRemoteProvider(server.url, timeout=2.0)
    append = memvault.RetainRequest(workspace_id=WS, agent_id="a1", tier="AGENT", content="x\n", mode="append")
    try:
        # GET /v1/capabilities (does the service record keys? asked once, before the first retain) on its own:
        # a retain sent while the server is still closing that connection would race its close, which no
        # client can tell from a server that answered keep-alive and then closed at once.
        assert not provider.honours_idempotency_keys()
        assert server.closed.acquire(timeout=5)
        assert provider.memvault_retain(append).bytes == 2
        assert server.closed.acquire(timeout=5)  # the server has closed the connection the pool keeps
        assert provider.memvault_retain(append).bytes == 2  # not UpstreamError: a fresh connection was used
    finally:
        provider.close()
        server.close()
    assert server.requests == 3  # GET /v1/capabilities (asked once: does the service record keys?), 2 retains
