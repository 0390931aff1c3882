"""Running the service: uvicorn around :func:`~memvault_http_remote.app.create_app`.

SIGTERM and SIGINT stop accepting connections, let in-flight requests finish
(up to ``shutdown_grace`` seconds), then close the vault.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import signal
import socket
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any, Final, cast

import click
import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

try:  # a dependency on CPython: uvicorn's C parser (and uvloop, which uvicorn picks itself)
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - depends on the environment
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

from memvault.contract.errors import InvalidRequest
from memvault.vault import Vault
from memvault_http_remote.app import create_app
from memvault_http_remote.errorwire import encode_error
from memvault_http_remote.settings import ServerSettings, TokenStore

__all__ = ["MAX_HEAD_BYTES", "bound_urls", "bounded_http_protocol", "http_protocol", "is_loopback", "run_server"]

log = logging.getLogger("memvault.serve")
_LOG_FORMAT: Final = "%(asctime)s memvault.serve %(levelname)s %(message)s"


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def configure_logging() -> None:
    """One line per request on standard error (idempotent)."""
    if not any(getattr(h, "_memvault", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(_LOG_FORMAT))
        handler._memvault = True  # type: ignore[attr-defined]
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


#: The longest request head (request line and headers) either parser reads before it answers
#: the typed 400 and closes: h11's own bound, which uvicorn keeps by default.
MAX_HEAD_BYTES: Final = 16 * 1024

_MALFORMED: Final = json.dumps(
    encode_error(
        InvalidRequest(
            "the request is not valid HTTP/1.1 (for example a negative, non-numeric or repeated "
            "Content-Length, a malformed header line, or a request line and headers over "
            f"{MAX_HEAD_BYTES // 1024} KiB): fix the client or the proxy in front of it",
            field="headers",
        )
    )
).encode("utf-8")


def _timeout_answer(timeout: float) -> bytes:
    """The typed 408 a connection gets when its request head does not arrive in time."""
    body = json.dumps(
        encode_error(
            InvalidRequest(
                f"the request head did not arrive within {timeout:g} s (server.body_timeout): send it at once",
                field="headers",
            )
        )
    ).encode("utf-8")
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(body)).encode("ascii")
        + b"\r\nconnection: close\r\n\r\n"
        + body
    )


class _HeadDeadline:
    """A connection's next request head must arrive within ``head_timeout`` seconds.

    Armed when the connection opens and when a request head begins, disarmed when
    the head is complete; on expiry the connection gets the typed 408 (or, if it
    sent nothing, is closed). Without it, uvicorn keeps a connection that sends a
    partial head, or nothing at all, open for ever: an unauthenticated caller
    could hold every file descriptor of the service. Idle keep-alive connections
    between requests are uvicorn's own (``timeout_keep_alive``); a body the
    service does not read, :class:`_AnsweredEarly`'s.
    """

    #: Seconds; ``run_server`` sets the service's ``body_timeout`` on its subclass.
    head_timeout: float = 5.0
    loop: asyncio.AbstractEventLoop  # uvicorn's protocols set it
    _head_timer: asyncio.TimerHandle | None = None
    _head_begun = False

    def _arm_head(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport, begun: bool) -> None:
        self._head_begun = self._head_begun or begun
        if self._head_timer is None:
            self._head_timer = loop.call_later(self.head_timeout, self._head_expired, loop, transport)

    def _disarm_head(self) -> None:
        self._head_begun = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]  # uvicorn's protocol, after this in the MRO
        self._arm_head(self.loop, cast(asyncio.Transport, transport), begun=False)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head()
        super().connection_lost(exc)  # type: ignore[misc]

    def _head_expired(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport) -> None:
        self._head_timer = None
        if transport.is_closing():
            return
        cycle = getattr(self, "cycle", None)
        if cycle is not None and not cycle.response_complete:
            # A pipelined head waits behind a request still being answered: its time starts after.
            self._arm_head(loop, transport, begun=False)
            return
        if self._head_begun:
            transport.write(_timeout_answer(self.head_timeout))
        transport.close()


class _LingeringTransport(asyncio.Transport):
    """The transport uvicorn's protocol is given: the connection's own, except that its
    :meth:`close` may linger (see :class:`_AnsweredEarly`)."""

    def __init__(self, transport: asyncio.Transport, protocol: _AnsweredEarly) -> None:
        super().__init__()
        self._transport = transport
        self._protocol = protocol

    def close(self) -> None:
        if not self._protocol._linger():
            self._transport.close()

    def is_closing(self) -> bool:
        return self._protocol._lingering or self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._transport.write(data)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self._transport.writelines(list_of_data)

    def write_eof(self) -> None:
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def abort(self) -> None:
        self._transport.abort()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()


class _AnsweredEarly:
    """A request answered before its body has all arrived ends its connection.

    The service answers many requests without reading their bodies: 401, the 503
    of its concurrency gate, 404, 405, 413 by the declared length, health. Left to
    uvicorn, the connection stays open for a next request, reading and dropping the
    rest of the body with no deadline at all (the head deadline ends with the head,
    uvicorn's keep-alive timer is cancelled by every read and re-armed only after
    the next answer, and ``body_timeout`` bounds only the bodies the service
    reads): a caller without a token could hold a connection for ever by sending
    one byte a second, and with enough of them every file descriptor.

    So such an answer carries ``Connection: close`` and ends the connection. The
    server first reads, and drops, what the client still sends, so that a client
    busy writing a large body gets to read the answer rather than a reset; it
    closes when the client closes its side, and at the latest ``head_timeout``
    (the service's ``body_timeout``) seconds after the answer. An answer whose
    application already said ``Connection: close`` (the 408 of a body too slow,
    uvicorn's 500) closes at once, as before.
    """

    #: Seconds; :class:`_HeadDeadline` holds the default, ``bounded_http_protocol`` the service's.
    head_timeout: float
    loop: asyncio.AbstractEventLoop  # uvicorn's protocols set these
    app: Any
    cycle: Any
    flow: Any
    _served: Any = None
    _raw: asyncio.Transport | None = None
    _close_added = False
    _lingering = False
    _linger_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = cast(asyncio.Transport, transport)
        if self._served is None:
            self._served, self.app = self.app, self._answer
        super().connection_made(_LingeringTransport(self._raw, self))  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the rest of a body already answered: dropped unparsed
        super().data_received(data)  # type: ignore[misc]

    def shutdown(self) -> None:
        if self._lingering and self._raw is not None:
            self._raw.close()
            return
        super().shutdown()  # type: ignore[misc]

    def _body_pending(self, scope: Any) -> bool:
        """Whether the request of ``scope`` is still sending its body (it is the latest request parsed)."""
        cycle = getattr(self, "cycle", None)
        return cycle is not None and cycle.scope is scope and bool(cycle.more_body)

    async def _answer(self, scope: Any, receive: Any, send: Any) -> None:
        """The application, its answers marked ``Connection: close`` while their request's body is unread."""
        if scope.get("type") != "http":
            await self._served(scope, receive, send)
            return

        async def send_marked(message: Any) -> None:
            if message.get("type") == "http.response.start" and self._body_pending(scope):
                headers = list(message.get("headers", ()))
                if not any(
                    bytes(name).lower() == b"connection" and b"close" in bytes(value).lower() for name, value in headers
                ):
                    headers.append((b"connection", b"close"))
                    message = {**message, "headers": headers}
                    self._close_added = True
            await send(message)

        await self._served(scope, receive, send_marked)

    def _linger(self) -> bool:
        """uvicorn closes the connection: whether it lingers instead (``Connection: close`` of ours,
        the answer complete and its request's body still arriving)."""
        raw, added = self._raw, self._close_added
        self._close_added = False
        if not added or self._lingering or raw is None or raw.is_closing():
            return False
        cycle = getattr(self, "cycle", None)
        if cycle is None or not cycle.response_complete or not cycle.more_body:
            return False  # nothing more will come: close at once
        self._lingering = True
        self._linger_timer = self.loop.call_later(self.head_timeout, raw.close)
        flow = getattr(self, "flow", None)
        if flow is not None:
            flow.resume_reading()  # uvicorn stops reading while a body waits unread
        return True


class _TypedH11Protocol(_AnsweredEarly, _HeadDeadline, H11Protocol):
    """uvicorn's h11 protocol, answering malformed HTTP with the service's typed JSON error body,
    bounding the time a request head may take (:class:`_HeadDeadline`), and ending a connection
    whose request was answered before its body arrived (:class:`_AnsweredEarly`)."""

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            self._disarm_head()
        elif self.conn.their_state is h11.IDLE:
            if self.conn.trailing_data[0]:  # part of a request head, waiting for the rest
                self._arm_head(self.loop, self.transport, begun=True)
        else:  # the head is complete: the body has its own deadline
            self._disarm_head()

    def send_400_response(self, msg: str) -> None:
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(_MALFORMED)).encode("ascii")),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=_MALFORMED),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()


_PROTOCOL: type[asyncio.Protocol] = _TypedH11Protocol


if HttpToolsProtocol is not None:

    class _TypedHttpToolsProtocol(_AnsweredEarly, _HeadDeadline, HttpToolsProtocol):
        """uvicorn's httptools protocol, answering malformed HTTP with the same typed JSON error body,
        bounding the time a request head may take (:class:`_HeadDeadline`), and ending a connection
        whose request was answered before its body arrived (:class:`_AnsweredEarly`).

        Unlike h11, httptools buffers a request head (the request line and the
        headers) of any length: one endless header line would fill the server's
        memory. Here the head is bounded like h11's (:data:`MAX_HEAD_BYTES`): the
        bytes of every read that ends with the head still incomplete are counted,
        and past the bound the connection gets the typed 400 and is closed. The
        read in which a head begins is not counted (a pipelined request may begin
        after another's body), so a head is held to the bound plus one read.
        """

        _head_open = False
        _head_bytes = 0

        def on_message_begin(self) -> None:
            self._head_open, self._head_bytes = True, 0
            self._arm_head(self.loop, self.transport, begun=True)
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._head_open = False
            self._disarm_head()
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            counted = self._head_open
            super().data_received(data)
            if counted and self._head_open and not self.transport.is_closing():
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES:
                    self.send_400_response("request head too large")

        def send_400_response(self, msg: str) -> None:
            self.transport.write(
                b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                b"content-length: "
                + str(len(_MALFORMED)).encode("ascii")
                + b"\r\nconnection: close\r\n\r\n"
                + _MALFORMED
            )
            self.transport.close()

    _PROTOCOL = _TypedHttpToolsProtocol


def http_protocol() -> type[asyncio.Protocol]:
    """The HTTP/1.1 protocol the service runs: httptools' C parser when installed, else h11.

    Both answer malformed HTTP with the service's typed 400 body. httptools (a
    dependency on CPython) cuts the server's CPU per request; see docs/performance.md.
    """
    return _PROTOCOL


def bounded_http_protocol(head_timeout: float) -> type[asyncio.Protocol]:
    """:func:`http_protocol` with request heads held to ``head_timeout`` seconds (and 16 KiB),
    and the rest of a body answered before it arrived to ``head_timeout`` seconds after the answer.

    For every uvicorn server of memvault (``memvault serve``, ``memvault mcp``'s
    streamable HTTP): uvicorn's own protocols keep a connection that sends a
    partial head, or nothing, open for ever, as one whose request was answered
    while its body still trickles in; and its httptools protocol reads a head of
    any length.
    """
    if head_timeout <= 0:
        raise ValueError(f"head_timeout must be positive, got {head_timeout!r}")
    return type("_BoundedProtocol", (_PROTOCOL,), {"head_timeout": float(head_timeout)})


class _Server(uvicorn.Server):
    """Prints the real listening address (also with ``port = 0``) once bound.

    Unlike plain uvicorn, a SIGTERM/SIGINT is not re-raised after the graceful
    shutdown: the process goes on to close the vault (checkpointing sqlite) and
    exits 0.
    """

    describe: str = ""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.started:
            return
        for url in bound_urls(self):
            click.echo(f"memvault serve: listening on {url} ({self.describe})")
        sys.stdout.flush()


def bound_urls(server: uvicorn.Server) -> list[str]:
    """``http://host:port`` of every socket a started uvicorn server listens on (the real port with ``port = 0``)."""
    urls = []
    for listener in getattr(server, "servers", []):
        for sock in listener.sockets:
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in str(host) else host
            urls.append(f"http://{shown}:{port}")
    return urls


def run_server(vault: Vault, settings: ServerSettings, tokens: TokenStore) -> None:
    """Serve ``vault`` until SIGTERM/SIGINT; in-flight requests finish first. Closes the vault."""
    configure_logging()
    app = create_app(vault, settings, tokens)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=int(max(1, settings.shutdown_grace)),
        limit_concurrency=None,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        # Our subclass of uvicorn's httptools or h11 protocol (never uvicorn's own): malformed
        # HTTP gets the typed error body whichever parser runs, a request head has
        # body_timeout seconds to arrive, as its body has, and an answer sent before its
        # body arrived ends the connection within body_timeout.
        http=bounded_http_protocol(settings.body_timeout),
    )
    server = _Server(config)
    auth = f"{len(tokens.entries)} token(s)" if tokens else "NO AUTH"
    server.describe = f"provider {vault.name}, {auth}"
    try:
        server.run()
    finally:
        vault.close()
        click.echo("memvault serve: stopped", err=True)
