"""Layer 7: what every ``memvault`` command shares: the context object, errors, output.

May import: every layer below the CLI.
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import click

from memvault.config import load_config
from memvault.contract.errors import InvalidRequest, MemvaultError, SkippedUnreadable
from memvault.vault import Vault, open_configured, settings_from_pairs

__all__ = ["Context", "emit", "fail", "json_option", "render_table", "skipped_unreadable"]

#: ``--json``: machine-readable output.
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class Context:
    def __init__(self, config: str | None, provider: str | None, options: tuple[str, ...]) -> None:
        self.config = config
        self.provider = provider
        self.options = options

    def open(self, *, scanner: str | None = None) -> Vault:
        """Open the configured provider; ``scanner`` overrides the configured scanner (``"off"``).

        A command is short-lived: new lines are not embedded in the background here (they stay
        pending, durably, for a long-running vault or ``memvault reembed``; contract P37).
        """
        settings: dict[str, Any] = dict(settings_from_pairs(self.options))
        if "config" in settings:
            raise InvalidRequest(
                "-o config=... is not a provider setting: pass the config file as `memvault --config PATH ...`",
                field="config",
            )
        if scanner is not None:
            settings["scanner"] = scanner
        settings["background_embedding"] = False
        settings["background_sweep"] = False
        return open_configured(load_config(self.config), self.provider, **settings)


def fail(exc: MemvaultError) -> None:
    click.echo(f"error: {exc}", err=True)
    sys.exit(2 if isinstance(exc, InvalidRequest) else 1)


@contextlib.contextmanager
def skipped_unreadable() -> Iterator[list[SkippedUnreadable]]:
    """Collect the :class:`~memvault.errors.SkippedUnreadable` warnings of the block, every one
    (not once per place), for the command to name each skipped item; other warnings show as usual."""
    skipped: list[SkippedUnreadable] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SkippedUnreadable)
        try:
            yield skipped
        finally:
            for item in caught:
                if isinstance(item.message, SkippedUnreadable):
                    skipped.append(item.message)
                else:
                    warnings.showwarning(item.message, item.category, item.filename, item.lineno, item.file, item.line)


def emit(as_json: bool, payload: Any, text: str) -> None:
    click.echo(json.dumps(payload, indent=2, ensure_ascii=False) if as_json else text)
