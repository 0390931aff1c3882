"""Layer 7: the ``memvault`` command group: inspect providers and call the verbs.

Every command reads ``memvault.toml`` (see :mod:`memvault.config`); ``--provider``
and ``--option key=value`` override it. ``--json`` prints machine-readable
output. Exit codes: 0 success, 1 an operation failed (or health is not ok),
2 invalid input. ``quarantine``, ``export``, ``import`` and ``inspect`` come from
the sibling modules; plugins add commands through ``memvault_register_commands``.

May import: every layer below (its siblings :mod:`memvault.cli.common`,
:mod:`memvault.cli.quarantine`, :mod:`memvault.cli.retention` and :mod:`memvault.cli.transfer` included).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import attrs
import click

from memvault.cli.common import Context, emit, fail, json_option, render_table, table_width
from memvault.cli.quarantine import quarantine
from memvault.cli.retention import retention
from memvault.cli.transfer import export, import_, inspect
from memvault.contract.errors import MemvaultError, NotSupported
from memvault.contract.models import (
    MAX_RECALL_LIMIT,
    ForgetRequest,
    HealthStatus,
    ReadRequest,
    RecallRequest,
    RetainRequest,
    Tier,
)
from memvault.contract.versions import CONTRACT_VERSION
from memvault.contract.wire import unstructure
from memvault.default_lifecycle.tools import idempotency_key_for
from memvault.doctor import run_checks
from memvault.registry import PLUGIN_FAILURE, get_registry
from memvault.vault import open as open_vault
from memvault.vault import settings_from_pairs

__all__ = ["cli", "main"]

_F = TypeVar("_F", bound=Callable[..., Any])
_TIERS = [t.value for t in Tier]
#: The tiers with a document per key (a date, a peer's slug); the others hold one document.
_KEYED = (Tier.DAILY.value, Tier.PEERS.value)


def _partition_options(func: _F) -> _F:
    func = click.option("--crew", "crew_id", default="", help="Crew id (for the CREW tier).")(func)
    func = click.option("--agent", "agent_id", default="", help="Agent id (for the agent tiers).")(func)
    func = click.option("--workspace", "workspace_id", required=True, help="Workspace id.")(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", type=click.Path(dir_okay=False), default=None, help="Path of memvault.toml.")
@click.option("--provider", default=None, help="Provider name (overrides the config).")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="Provider setting.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (as each command's --json).")
@click.version_option(package_name="memvault", message=f"memvault %(version)s (contract {CONTRACT_VERSION})")
@click.pass_context
def cli(ctx: click.Context, config: str | None, provider: str | None, options: tuple[str, ...], as_json: bool) -> None:
    """memvault: pluggable long-term memory for AI agents."""
    ctx.obj = Context(config, provider, options, as_json)
    if as_json:  # also for commands that declare their own --json (a plugin's, a group's)
        ctx.default_map = _json_defaults(cli)


def _json_defaults(group: click.Group) -> dict[str, Any]:
    """A click ``default_map`` turning on the ``--json`` flag of every command under ``group``."""
    found: dict[str, Any] = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found[name] = _json_defaults(command)
        elif any(param.name == "as_json" for param in command.params):
            found[name] = {"as_json": True}
    return found


@cli.command()
@click.option("--health", "with_health", is_flag=True, help="Open each provider's scratch instance and probe it.")
@json_option()
def providers(with_health: bool, as_json: bool) -> None:
    """List installed providers with distribution, version, contract version and capabilities.

    CONTRACT is the version of the contract (docs/reference/contract.md) each provider
    declares it was written for; this memvault's newest is in ``memvault --version``.
    """
    registry = get_registry()
    rows: list[dict[str, Any]] = []
    for name in registry.names():
        info = registry.get(name)
        row: dict[str, Any] = {
            "name": name,
            "distribution": info.distribution,
            "version": info.version,
            "contract_version": info.contract_version,
            "capabilities": sorted(info.capabilities),
            "description": info.description,
        }
        if with_health:
            row["health"] = _probe(name)
        rows.append(row)
    problems = [
        {"plugin": f.name, "distribution": f.distribution, "cause": f.cause, "error": f.error}
        for f in registry.failures
    ] + [
        {"plugin": " and ".join(plugins), "distribution": "", "cause": f"both register provider {name!r}"}
        for name, plugins in registry.conflicts.items()
    ]
    if as_json:
        emit(True, {"providers": rows, "problems": problems}, "")
        return
    headers = ["NAME", "DISTRIBUTION", "VERSION", "CONTRACT", "CAPABILITIES"] + (["HEALTH"] if with_health else [])
    table = [
        [r["name"], r["distribution"], r["version"], r["contract_version"], ", ".join(r["capabilities"]) or "-"]
        + ([r["health"]] if with_health else [])
        for r in rows
    ]
    click.echo(render_table(headers, table, table_width()))
    for problem in problems:
        where = f" (distribution {problem['distribution']})" if problem["distribution"] else ""
        click.echo(f"warning: plugin {problem['plugin']}{where} not usable: {problem['cause']}", err=True)


def _probe(name: str) -> str:
    import tempfile
    from pathlib import Path

    info = get_registry().get(name)
    if info.scratch is None:
        return "needs settings"
    with tempfile.TemporaryDirectory(prefix="memvault-health-") as tmp:
        try:
            with open_vault(name, **dict(info.scratch(Path(tmp)))) as vault:
                status = vault.health()
        except MemvaultError as exc:
            return f"error: {exc}"
    return "ok" if status.ok else f"not ok: {status.message}"


@cli.command()
@_partition_options
@click.option("--tier", type=click.Choice(_TIERS), required=True, help="Memory tier.")
@click.option("--key", default="", help="Date for daily (default today), slug for peers.")
@click.option("--mode", type=click.Choice(["replace", "append"]), required=True, help="Replace or append.")
@click.option("--subject", "data_subject_id", default="", help="Data subject id, for erasure.")
@click.option("--no-newline", is_flag=True, help="Store CONTENT exactly as given: no newline added at its end.")
@click.option(
    "--idempotency-key",
    default="",
    help="Name this write: the same command with the same key stores it once (default: a new key, where the "
    "provider records keys; --json prints it).",
)
@click.argument("content", required=False)
@json_option()
@click.pass_obj
def retain(obj: Context, /, content: str | None, as_json: bool, no_newline: bool, **fields: str) -> None:
    """Store CONTENT (or standard input when CONTENT is '-' or missing).

    The stored text ends with a newline: one is added when CONTENT (or standard
    input) does not end with one, so appended facts stay on lines of their own.
    --no-newline stores it exactly as given.

    Each write carries an idempotency key where the provider records them
    (contract P44): run the command again with --idempotency-key and the key
    --json printed, and a write that already happened is not stored twice.
    """
    if content is None or content == "-":
        content = sys.stdin.read()
    if content and not no_newline and not content.endswith("\n"):
        content += "\n"
    try:
        request = RetainRequest(content=content, **fields)
        with obj.open() as vault:
            if not request.idempotency_key:
                request = attrs.evolve(request, idempotency_key=idempotency_key_for(vault))
            result = vault.retain(request)
    except MemvaultError as exc:
        fail(exc)
        return
    text = f"stored {result.id} ({result.bytes} bytes)"
    if result.warning:
        text += f"\nwarning: {result.warning}"
    payload = unstructure(result)
    if request.idempotency_key:
        payload["idempotency_key"] = request.idempotency_key
    emit(as_json, payload, text)


@cli.command()
@_partition_options
@click.option("--tier", type=click.Choice(_TIERS), default=None, help="Only this tier (default: all readable).")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_RECALL_LIMIT),
    default=MAX_RECALL_LIMIT,
    show_default=True,
    help=f"At most this many hits (1-{MAX_RECALL_LIMIT}).",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Show each hit's score parts: its lexical score and its similarity in meaning (with an embedder).",
)
@click.argument("query")
@json_option()
@click.pass_obj
def recall(obj: Context, /, query: str, as_json: bool, explain: bool, **fields: Any) -> None:
    """Search memory for lines matching QUERY, by its words and, with an embedder, by its meaning."""
    try:
        request = RecallRequest(query=query, **fields)
        with obj.open(read_only=True) as vault:
            result = vault.recall(request)
    except MemvaultError as exc:
        fail(exc)
        return
    rows: list[list[object]]
    if explain:
        rows = [
            [f"{h.score:.3f}", _part(h.lexical), _part(h.similarity), f"{h.source}:{h.line}", _flat(h.snippet)]
            for h in result.hits
        ]
        headers = ["SCORE", "LEXICAL", "MEANING", "SOURCE", "SNIPPET"]
    else:
        rows = [[f"{h.score:.3f}", f"{h.source}:{h.line}", _flat(h.snippet)] for h in result.hits]
        headers = ["SCORE", "SOURCE", "SNIPPET"]
    text = render_table(headers, rows, table_width()) if rows else "no matches"
    if explain and result.hits and all(h.lexical is None for h in result.hits):
        text += "\n(by words only: no embedder, or the provider keeps no vectors)"
    if result.quarantined:
        text += "\nquarantined: " + ", ".join(result.quarantined)
    emit(as_json, unstructure(result), text)


def _part(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _flat(snippet: str) -> str:
    return snippet.replace("\n", " ")[:100]


@cli.command()
@click.option(
    "--timeout", type=float, default=None, help="Stop after this many seconds; the rest stays pending (resumable)."
)
@json_option()
@click.pass_obj
def reembed(obj: Context, timeout: float | None, as_json: bool) -> None:
    """Embed every line still waiting for a vector of the configured embedder (recall by meaning).

    New lines are embedded in the background by a long-running vault (memvault serve); this
    command does it now, for a store written by short-lived commands or after the embedder's
    model changed (then every line waits again). Resumable: what it stored stays stored,
    and a second run starts with what is left. Exit 1 when lines are still pending at the end.
    """
    try:
        with obj.open() as vault:
            if vault.embedding is None:
                raise NotSupported(
                    f"provider {vault.name!r} does not recall by meaning here: it keeps no vectors, or no "
                    "embedder is installed or configured (pip install memvault-embed-minilm; [embed] in "
                    "memvault.toml)"
                )
            start = vault.embedding_backlog()
            if as_json or not start:
                report = vault.embed_pending(timeout=timeout)
            else:
                with click.progressbar(length=start, label="embedding", file=sys.stderr, show_eta=True) as bar:
                    shown = [0]

                    def advance(done: int, total: int) -> None:
                        bar.update(min(done, start) - shown[0])
                        shown[0] = min(done, start)

                    report = vault.embed_pending(timeout=timeout, progress=advance)
    except MemvaultError as exc:
        fail(exc)
        return
    assert report is not None
    rate = report.embedded / report.seconds if report.seconds > 0 else 0.0
    payload = {
        "provider": vault.name,
        "model_id": report.model_id,
        "embedded": report.embedded,
        "pending": report.backlog,
        "seconds": round(report.seconds, 3),
    }
    text = f"embedded {report.embedded} line(s) with {report.model_id} in {report.seconds:.1f} s ({rate:.0f}/s)"
    text += f"; {report.backlog} still pending (run again to go on)" if report.backlog else "; none pending"
    emit(as_json, payload, text)
    if report.backlog:
        sys.exit(1)


@cli.command()
@_partition_options
@click.option("--tier", type=click.Choice(_TIERS), required=True, help="Memory tier.")
@click.option("--key", default="", help="Date for daily (default today), slug for peers.")
@json_option()
@click.pass_obj
def read(obj: Context, /, as_json: bool, **fields: str) -> None:
    """Print one whole document."""
    if fields["key"] and fields["tier"] not in _KEYED:
        raise click.BadParameter(
            f"--key applies to daily and peers only: the {fields['tier']} tier has one document", param_hint="--key"
        )
    try:
        request = ReadRequest(**fields)
        with obj.open(read_only=True) as vault:
            result = vault.read(request)
    except MemvaultError as exc:
        fail(exc)
        return
    emit(as_json, unstructure(result), result.content)


@cli.command()
@_partition_options
@click.option("--id", "id_", default="", help="Document label, e.g. AGENT.md or daily/2026-01-31.md.")
@click.option("--subject", "data_subject_id", default="", help="Erase every document of this data subject.")
@json_option()
@click.pass_obj
def forget(obj: Context, /, id_: str, data_subject_id: str, as_json: bool, **fields: str) -> None:
    """Remove a document (--id) or every document of a data subject (--subject)."""
    try:
        request = ForgetRequest(id=id_, data_subject_id=data_subject_id, **fields)
        with obj.open() as vault:
            result = vault.forget(request)
    except MemvaultError as exc:
        fail(exc)
        return
    text = f"removed {result.removed} document(s)"
    if result.pending:
        text += (
            "; erasure PENDING: the text may still be in the store's files (readers kept them busy). "
            "The provider finishes it on its own; run this command again to finish it or check"
        )
    emit(as_json, unstructure(result), text)  # "pending" appears only when true, as on the wire


@cli.command()
@json_option()
@click.pass_obj
def health(obj: Context, as_json: bool) -> None:
    """Probe the configured provider; exit 1 when it is not healthy or cannot be opened."""
    name = obj.provider or "configured provider"
    try:
        with obj.open(read_only=True) as vault:
            status = vault.health()
            name = vault.name
    except MemvaultError as exc:
        # An operator asking for health wants a verdict, not a usage error:
        # a store that cannot even be opened is simply not healthy.
        status = HealthStatus(ok=False, message=f"cannot open: {exc}")
    text = f"{name}: ok" if status.ok else f"{name}: NOT OK: {status.message}"
    if status.pending_erasures:
        text += f" ({status.pending_erasures} erasure(s) pending: text not yet scrubbed from the store's files)"
    if status.embedding_backlog:
        text += f" ({status.embedding_backlog} line(s) waiting to be embedded: found by their words meanwhile)"
    emit(as_json, {"provider": name, **unstructure(status)}, text)  # pending_erasures only when not 0
    if not status.ok:
        sys.exit(1)


@cli.command()
@json_option()
@click.pass_obj
def doctor(obj: Context, as_json: bool) -> None:
    """Check the installation and the configured store; print what to fix.

    Python version, installed plugins and providers (each probed on a fresh
    instance), the config file, the configured provider, an SQLite store's schema
    version and integrity (read-only), the configured scanner (when memvault.toml names
    one; a model reviewer is probed with a few plain texts), and free disk space. Exit 1 when a
    check fails.
    """
    try:
        options = dict(settings_from_pairs(obj.options))
    except MemvaultError as exc:
        fail(exc)
        return
    progress = (
        None if as_json or not sys.stderr.isatty() else (lambda step: click.echo(f"checking {step}...", err=True))
    )
    checks = run_checks(obj.config, options, obj.provider, progress=progress)
    failed = [c for c in checks if c.status == "fail"]
    if as_json:
        emit(True, {"ok": not failed, "checks": [unstructure_check(c) for c in checks]}, "")
    else:
        rows = [[c.name, c.status.upper() if c.status != "ok" else "ok", c.detail] for c in checks]
        click.echo(render_table(["CHECK", "STATUS", "DETAIL"], rows, table_width()))
        fixes = [c for c in checks if c.status != "ok" and c.fix]
        if fixes:
            click.echo("\nto fix:")
            for c in fixes:
                click.echo(f"  {c.name}: {c.fix}")
        warned = sum(1 for c in checks if c.status == "warn")
        summary = f"{len(failed)} problem(s) found" if failed else "no problems found"
        if warned:
            summary += f", {warned} warning(s) (see above)"
        click.echo("\n" + summary)
    if failed:
        sys.exit(1)


def unstructure_check(check: Any) -> dict[str, str]:
    return {"name": check.name, "status": check.status, "detail": check.detail, "fix": check.fix}


cli.add_command(quarantine)
cli.add_command(retention)
cli.add_command(export)
cli.add_command(import_)
cli.add_command(inspect)


def _add_plugin_commands() -> None:
    registry = get_registry()
    for impl in registry.plugin_manager.hook.memvault_register_commands.get_hookimpls():
        try:
            impl.function(cli=cli)
        except Exception as exc:  # noqa: BLE001 - one broken plugin must not break the CLI
            logging.getLogger("memvault.cli").warning(
                "plugin %s could not add its commands: %s: %s", impl.plugin_name, type(exc).__name__, exc
            )


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``memvault`` console script."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        # A plugin that failed to load is said once, where it matters: by `memvault providers`,
        # and in the error of a command asking for a provider it would have given.
        handler.addFilter(lambda record: not getattr(record, PLUGIN_FAILURE, False))
    _add_plugin_commands()
    cli.main(args=list(argv) if argv is not None else None, prog_name="memvault")
