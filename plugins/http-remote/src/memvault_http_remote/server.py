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
from collections.abc import Iterator
from typing import Final

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

__all__ = ["bound_urls", "http_protocol", "is_loopback", "run_server"]

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


_MALFORMED: Final = json.dumps(
    encode_error(
        InvalidRequest(
            "the request is not valid HTTP/1.1 (for example a negative, non-numeric or repeated "
            "Content-Length, or a malformed header line): fix the client or the proxy in front of it",
            field="headers",
        )
    )
).encode("utf-8")


class _TypedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, answering malformed HTTP with the service's typed JSON error body."""

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

    class _TypedHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol, answering malformed HTTP with the same typed JSON error body."""

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
        # Our subclass of uvicorn's httptools or h11 protocol (never uvicorn's own): malformed
        # HTTP gets the typed error body whichever parser runs.
        http=http_protocol(),
    )
    server = _Server(config)
    auth = f"{len(tokens.entries)} token(s)" if tokens else "NO AUTH"
    server.describe = f"provider {vault.name}, {auth}"
    try:
        server.run()
    finally:
        vault.close()
        click.echo("memvault serve: stopped", err=True)
