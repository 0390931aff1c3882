"""The entry point module (group ``memvault``): adds ``memvault mcp`` to the CLI."""

from __future__ import annotations

import click

from memvault import hookimpl

__all__ = ["memvault_register_commands"]


@hookimpl
def memvault_register_commands(cli: click.Group) -> None:
    from memvault_mcp.commands import mcp

    cli.add_command(mcp)
