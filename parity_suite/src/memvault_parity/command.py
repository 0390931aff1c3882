"""``memvault parity NAME``: the suite as a command, added through ``memvault_register_commands``.

Importing this module is cheap: pytest and the suite load only when the command runs.
"""

from __future__ import annotations

import contextlib
import json
import sys

import click

from memvault.cli.common import json_option
from memvault.hooks.markers import hookimpl

__all__ = ["memvault_register_commands", "parity"]


@click.command()
@click.argument("name")
@click.option(
    "--option",
    "-o",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Provider setting (repeatable). Without any, each test gets the provider's fresh scratch store.",
)
@click.option("-k", "keyword", default=None, metavar="EXPR", help="Only tests matching this pytest -k expression.")
@click.option("-x", "exitfirst", is_flag=True, help="Stop at the first failure.")
@click.option("-v", "verbose", is_flag=True, help="List every test as it runs.")
@click.option(
    "--strict",
    is_flag=True,
    help="Also fail the contract lines newer than the version the provider declares (default: list them).",
)
@json_option("Print the summary as JSON on standard output (pytest's report goes to standard error).")
def parity(
    name: str,
    options: tuple[str, ...],
    keyword: str | None,
    exitfirst: bool,
    verbose: bool,
    strict: bool,
    as_json: bool,
) -> None:
    """Run the parity suite against the installed provider NAME.

    The provider is held to every contract line up to the contract version it
    declares (``memvault providers`` shows it); the newer lines it does not meet
    yet are listed apart and do not fail the run, unless --strict.

    Exits 0 when every applicable test passes, 1 when any fails, 2 on bad input.
    """
    from memvault.contract.errors import MemvaultError
    from memvault.registry import get_registry
    from memvault.vault import settings_from_pairs

    try:
        info = get_registry().get(name)
        settings = dict(settings_from_pairs(options)) if options else None
    except MemvaultError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if settings is None and info.scratch is None:
        click.echo(
            f"error: provider {name!r} registers no scratch settings, so the suite cannot make an empty "
            "store by itself: pass its settings with --option key=value",
            err=True,
        )
        sys.exit(2)
    from memvault_parity.runner import run_parity

    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        outcome = run_parity(
            name,
            settings,
            keyword=keyword,
            exitfirst=exitfirst,
            strict=strict,
            extra_args=["-v"] if verbose else [],
            out=sys.stderr if as_json else None,
        )
    if as_json:
        summary = {
            "provider": name,
            "ok": outcome.ok,
            "passed": outcome.passed,
            "failed": [{"test": test, "contract": numbers} for test, numbers in outcome.failed],
            "not_met": [
                {"test": test, "contract_version": version, "contract": numbers}
                for test, version, numbers in outcome.not_met
            ],
            "skipped": outcome.skipped,
            "xfailed": outcome.xfailed,
            "pytest_exit_code": outcome.exit_code,
        }
        click.echo(json.dumps(summary, indent=2))
    sys.exit(0 if outcome.ok else 1)


@hookimpl
def memvault_register_commands(cli: click.Group) -> None:
    cli.add_command(parity)
