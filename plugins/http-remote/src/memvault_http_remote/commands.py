"""``memvault serve`` and ``memvault token``, added to the CLI through ``memvault_register_commands``."""

from __future__ import annotations

import errno
import secrets
import socket
import sys
from pathlib import Path
from typing import Any, Final

import attrs
import click

from memvault.config import load_config
from memvault.contract.errors import InvalidRequest, MemvaultError
from memvault.vault import open_configured, settings_from_pairs
from memvault_http_remote.settings import ServerSettings, TokenStore, hash_token, load_tokens_file

__all__ = ["port_in_use", "serve", "token"]

#: Where `memvault serve` with no arguments keeps its data: sqlite in the current directory.
DEFAULT_SQLITE_PATH: Final = "memvault.db"
#: The command the hints print, runnable as printed (``--workspace`` is required; ``*`` would be every workspace).
TOKEN_NEW_HINT: Final = "memvault token new --name NAME --workspace WORKSPACE"


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def port_in_use(host: str, port: int, option: str = "--port") -> str:
    """What to say when ``host:port`` is taken by another process (``""`` when it is free, or 0).

    Binds a socket the way the server will (``SO_REUSEADDR``, as uvicorn) and closes it at once,
    before anything is opened, so a taken port is one clear line instead of a bare errno.
    """
    if not port:
        return ""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError:
        return ""  # the server reports an unusable host itself
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return ""
            return (
                f"port {port} on {host} is in use: stop the other process, or pass another {option} (0: any free one)"
            )
    return ""


def _root_context(ctx: click.Context) -> tuple[str | None, str | None, tuple[str, ...]]:
    obj = ctx.find_root().obj
    return (
        getattr(obj, "config", None),
        getattr(obj, "provider", None),
        tuple(getattr(obj, "options", ()) or ()),
    )


@click.command()
@click.option("--provider", default=None, help="Provider to expose (default: the config's, else sqlite).")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="Provider setting.")
@click.option("--host", default=None, help="Address to bind (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port to bind (default 8765; 0 picks a free one).")
@click.option("--tokens-file", default=None, type=click.Path(dir_okay=False), help="TOML file of [[tokens]].")
@click.option("--max-body-bytes", type=int, default=None, help="Request body limit (413 above it).")
@click.option("--request-timeout", type=float, default=None, help="Seconds per request (504 past it).")
@click.option("--max-concurrent", type=int, default=None, help="Requests in flight (503 past it).")
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    help="Allow binding a non-loopback address with no tokens configured (anyone can read and write).",
)
@click.pass_context
def serve(
    ctx: click.Context,
    provider: str | None,
    options: tuple[str, ...],
    host: str | None,
    port: int | None,
    tokens_file: str | None,
    max_body_bytes: int | None,
    request_timeout: float | None,
    max_concurrent: int | None,
    insecure_no_auth: bool,
) -> None:
    """Serve a provider over JSON/HTTP (the memvault service, API under /v1).

    With no arguments: the config's provider, else sqlite in ./memvault.db, on
    127.0.0.1:8765. Stop with SIGTERM or Ctrl-C; in-flight requests finish.
    """
    from memvault_http_remote.server import is_loopback, run_server

    config_path, root_provider, root_options = _root_context(ctx)
    try:
        config = load_config(config_path)
        name = provider or root_provider or config.provider
        settings: dict[str, Any] = dict(config.providers.get(name, {}))
        settings.update(settings_from_pairs(root_options))
        settings.update(settings_from_pairs(options))
        if name == "sqlite" and "path" not in settings:
            settings["path"] = DEFAULT_SQLITE_PATH
        server = ServerSettings.from_table(dict(config.server), source=config.source or "memvault.toml")
        overrides: dict[str, Any] = {
            "host": host,
            "port": port,
            "tokens_file": tokens_file,
            "max_body_bytes": max_body_bytes,
            "request_timeout": request_timeout,
            "max_concurrent": max_concurrent,
        }
        server = attrs.evolve(server, **{k: v for k, v in overrides.items() if v is not None})
        entries = list(server.tokens)
        if server.tokens_file:
            base = Path(config.source).parent if config.source and not tokens_file else Path.cwd()
            entries += load_tokens_file(base / server.tokens_file)
        tokens = TokenStore(entries)
    except MemvaultError as exc:
        _fail(str(exc), 2 if isinstance(exc, InvalidRequest) else 1)
        return
    if not tokens and not is_loopback(server.host) and not insecure_no_auth:
        _fail(
            f"refusing to serve on {server.host} without any token: anyone who can reach it could read "
            "and erase every workspace. Configure tokens ([[server.tokens]] in memvault.toml or "
            f"--tokens-file; create entries with `{TOKEN_NEW_HINT}`), bind 127.0.0.1, or pass "
            "--insecure-no-auth if this network is trusted"
        )
        return
    taken = port_in_use(server.host, server.port)
    if taken:
        _fail(taken, 1)
        return
    # Open the provider before any warning: a mistyped name or a missing setting is
    # the one message the user needs, not buried under the no-token warning.
    try:
        vault = open_configured(config, name, **settings)
    except MemvaultError as exc:
        _fail(str(exc), 2 if isinstance(exc, InvalidRequest) else 1)
        return
    if not tokens:
        click.echo(
            "warning: no tokens configured: every request is allowed, on every workspace. "
            + (
                "Only this machine can connect (loopback). "
                if is_loopback(server.host)
                else "--insecure-no-auth: ANYONE WHO CAN REACH THIS ADDRESS CAN READ AND ERASE MEMORY. "
            )
            + f"Create tokens with `{TOKEN_NEW_HINT}`.",
            err=True,
        )
    run_server(vault, server, tokens)


@click.group()
def token() -> None:
    """Create and hash bearer tokens for `memvault serve`."""


@token.command("new")
@click.option("--name", default="", help="A label for logs (who holds the token).")
@click.option(
    "--workspace",
    "workspaces",
    multiple=True,
    required=True,
    help="Workspace the token may touch: an exact id, a prefix ending in '*', or '*'. Repeatable.",
)
@click.option(
    "--table",
    type=click.Choice(["tokens", "server.tokens"]),
    default="tokens",
    show_default=True,
    help="TOML table name: 'tokens' for a tokens file, 'server.tokens' for memvault.toml.",
)
def token_new(name: str, workspaces: tuple[str, ...], table: str) -> None:
    """Generate a token: the secret goes to stderr (shown once), the hashed TOML entry to stdout."""
    from memvault_http_remote.settings import TokenEntry

    secret = "mvt_" + secrets.token_urlsafe(32)
    try:
        entry = TokenEntry(name=name, sha256=hash_token(secret), workspaces=list(workspaces))
    except InvalidRequest as exc:
        _fail(str(exc))
        return
    click.echo(f"token (give it to the client; it is not stored anywhere): {secret}", err=True)
    listed = ", ".join(f'"{w}"' for w in entry.workspaces)
    click.echo(f'[[{table}]]\nname = "{entry.name}"\nsha256 = "{entry.sha256}"\nworkspaces = [{listed}]')


@token.command("hash")
@click.argument("secret", required=False)
def token_hash(secret: str | None) -> None:
    """Print the sha256 entry value of SECRET (or of the first line of standard input)."""
    if secret is None:
        secret = sys.stdin.readline().strip()
    if not secret:
        _fail("no token given: pass it as an argument or on standard input")
        return
    click.echo(hash_token(secret))
