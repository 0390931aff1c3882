"""``memvault mcp``: the MCP server command, added to the CLI through ``memvault_register_commands``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from memvault import InvalidRequest, MemvaultError, settings_from_pairs
from memvault_mcp.config import DEFAULT_PRINCIPAL, ServerConfig, load_server_config, parse_server_config

__all__ = ["mcp"]


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _resolve_config(
    slots_file: str | None, slot_names: tuple[str, ...], principal: str | None, workspace: str | None
) -> ServerConfig:
    if slots_file and slot_names:
        raise InvalidRequest("pass either --slots FILE or --slot NAME, not both", field="slots")
    if slots_file:
        config = load_server_config(slots_file)
    else:
        table: dict[str, Any] = {"slots": [{"name": name} for name in slot_names]}
        config = parse_server_config(table, source="command line")
    overrides: dict[str, Any] = {}
    if principal is not None:
        if not principal.strip():
            raise InvalidRequest("--principal is blank: name the local user", field="principal")
        overrides["principal"] = principal
    if workspace is not None:
        overrides["workspace"] = workspace
    if overrides:
        config = ServerConfig(
            slots=config.slots,
            workspace=overrides.get("workspace", config.workspace),
            principal=overrides.get("principal", config.principal),
            tokens_file=config.tokens_file,
            source=config.source,
            http=config.http,
        )
    return config


def _tokens_path(config: ServerConfig, tokens_file: str | None) -> Path | None:
    if tokens_file:
        return Path(tokens_file)
    if config.tokens_file:
        base = Path(config.source).parent if config.source and config.source != "command line" else Path.cwd()
        return base / config.tokens_file
    return None


@click.command()
@click.option("--slots", "slots_file", default=None, type=click.Path(dir_okay=False), help="TOML file of [[slots]].")
@click.option(
    "--slot",
    "slot_names",
    multiple=True,
    metavar="NAME",
    help="Serve a memory slot NAME on the memvault.toml provider, scoped by principal (repeatable).",
)
@click.option(
    "--principal", default=None, help=f"stdio: whose memory (default: the file's, else {DEFAULT_PRINCIPAL!r})."
)
@click.option("--workspace", default=None, help="Workspace of slots that name none (default: 'default').")
@click.option(
    "--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True, help="How clients connect."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="http: address to bind.")
@click.option("--port", type=int, default=8766, show_default=True, help="http: port (0 picks a free one).")
@click.option("--path", "http_path", default="/mcp", show_default=True, help="http: the endpoint path.")
@click.option("--tokens-file", default=None, type=click.Path(dir_okay=False), help="http: TOML file of [[tokens]].")
@click.option("--insecure-no-auth", is_flag=True, help="http: allow a non-loopback address with no token configured.")
@click.option("--check", is_flag=True, help="Open everything, print what would be served, and exit.")
@click.pass_context
def mcp(
    ctx: click.Context,
    slots_file: str | None,
    slot_names: tuple[str, ...],
    principal: str | None,
    workspace: str | None,
    transport: str,
    host: str,
    port: int,
    http_path: str,
    tokens_file: str | None,
    insecure_no_auth: bool,
    check: bool,
) -> None:
    """Serve memory slots to MCP clients (desktop agents, IDEs, remote agents).

    Each slot's tools (<slot>__read, __write, __search, __append_daily; notes:
    __save, __remove) and its documents (resources memvault://<slot>/...) are
    bound to the caller's own memory: the --principal over stdio, the bearer
    token's name over HTTP. Logs go to standard error.
    """
    from memvault_http_remote.commands import port_in_use
    from memvault_http_remote.settings import TokenStore, load_tokens_file
    from memvault_mcp.service import MemoryService, open_slots

    root = ctx.find_root().obj
    try:
        config = _resolve_config(slots_file, slot_names, principal, workspace)
        root_options = dict(settings_from_pairs(getattr(root, "options", ()) or ()))
        tokens = TokenStore([])
        tokens_path = _tokens_path(config, tokens_file)
        if transport == "http" and tokens_path is not None:
            tokens = TokenStore(load_tokens_file(tokens_path))
        if transport == "stdio" and tokens_path is not None and tokens_file:
            raise InvalidRequest("--tokens-file only applies to --transport http", field="tokens_file")
        if check and _describe_unopened(config, root, root_options, transport, tokens):
            return
        taken = port_in_use(host, port) if transport == "http" and not check else ""
        if taken:  # said before any store is opened (and created)
            _fail(taken, 1)
            return
        slots, vaults = open_slots(
            config,
            memvault_config=getattr(root, "config", None),
            default_provider=getattr(root, "provider", None),
            default_options=root_options,
        )
    except MemvaultError as exc:
        _fail(str(exc), 2 if isinstance(exc, InvalidRequest) else 1)
        return
    try:
        service = MemoryService(slots, workspace_id=config.workspace)
    except MemvaultError as exc:
        for vault in vaults:
            vault.close()
        _fail(str(exc), 2 if isinstance(exc, InvalidRequest) else 1)
        return
    try:
        if check:
            _describe(config, slots, transport, tokens)
            return
        if transport == "stdio":
            import anyio

            from memvault_mcp.server import run_stdio

            anyio.run(run_stdio, service, config.principal)
        else:
            _serve_http(service, config, tokens, host, port, http_path, insecure_no_auth)
    finally:
        service.close(vaults)


def _describe(config: ServerConfig, slots: list[Any], transport: str, tokens: Any) -> None:
    for spec, slot in zip(config.slots, slots, strict=True):
        scope = f"value {spec.value!r}" if spec.scope == "value" else spec.scope
        click.echo(
            f"slot {spec.name}: kind {spec.kind}, provider {slot.vault.name}, "
            f"workspace {spec.workspace or config.workspace}, scope {scope}"
        )
    if transport == "stdio":
        click.echo(f"stdio: principal {config.principal!r}")
    else:
        click.echo(f"http: {len(tokens.entries)} token(s)" if tokens else "http: NO AUTH")


def _describe_unopened(
    config: ServerConfig, root: Any, root_options: dict[str, str], transport: str, tokens: Any
) -> bool:
    """``--check`` where a slot's store does not exist yet: describe the slots without opening
    any (opening would create the store; a check only looks). False when every store exists."""
    from memvault.config import Config, load_config
    from memvault.doctor import missing_store

    memvault_config = load_config(getattr(root, "config", None))
    default = getattr(root, "provider", None)
    missing = []
    for spec in config.slots:
        if spec.provider:
            missing.append((spec.provider, missing_store(Config(), spec.provider, spec.options)))
        else:
            options = {**root_options, **spec.options}
            name = default or memvault_config.provider
            missing.append((name, missing_store(memvault_config, name, options)))
    if not any(message for _, message in missing):
        return False
    for spec, (name, message) in zip(config.slots, missing, strict=True):
        scope = f"value {spec.value!r}" if spec.scope == "value" else spec.scope
        state = message.split(" (", 1)[0] + " (created on the first write)" if message else "store exists"
        click.echo(
            f"slot {spec.name}: kind {spec.kind}, provider {name}, "
            f"workspace {spec.workspace or config.workspace}, scope {scope}; {state}"
        )
    if transport == "stdio":
        click.echo(f"stdio: principal {config.principal!r}")
    else:
        click.echo(f"http: {len(tokens.entries)} token(s)" if tokens else "http: NO AUTH")
    return True


def _slot_summary(config: ServerConfig) -> str:
    return ", ".join(s.name for s in config.slots)


def _serve_http(
    service: Any,
    config: ServerConfig,
    tokens: Any,
    host: str,
    port: int,
    http_path: str,
    insecure_no_auth: bool,
) -> None:
    from memvault_http_remote.commands import TOKEN_NEW_HINT
    from memvault_http_remote.server import is_loopback
    from memvault_mcp.server import run_http

    if not tokens:
        if not is_loopback(host) and not insecure_no_auth:
            _fail(
                f"refusing to serve on {host} without any token: anyone who can reach it could read and write "
                f"memory. Pass --tokens-file (entries from `{TOKEN_NEW_HINT}`), bind 127.0.0.1, or pass "
                "--insecure-no-auth if this network is trusted"
            )
            return
        click.echo(
            f"warning: no tokens configured: every request is served as principal {config.principal!r}, "
            f"on every workspace. Create tokens with `{TOKEN_NEW_HINT}`.",
            err=True,
        )
    describe = f"{http_path}, slots {_slot_summary(config)}, " + (
        f"{len(tokens.entries)} token(s)" if tokens else "NO AUTH"
    )
    run_http(
        service,
        tokens,
        host=host,
        port=port,
        path=http_path,
        open_principal=config.principal,
        describe=describe,
        limits=config.http,
    )
    click.echo("memvault mcp: stopped", err=True)
