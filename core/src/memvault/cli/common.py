"""Layer 7: what every ``memvault`` command shares: the context object, errors, output.

May import: every layer below the CLI.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

import click

from memvault.config import load_config
from memvault.contract.errors import InvalidRequest, MemvaultError, SkippedUnreadable, Unauthorized
from memvault.doctor import missing_store
from memvault.vault import Vault, open_configured, settings_from_pairs

__all__ = ["Context", "emit", "fail", "for_cli", "json_option", "render_table", "skipped_unreadable", "table_width"]


_F = TypeVar("_F", bound=Callable[..., Any])


def _json_flag(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """A command's ``--json``, or the group's (``memvault --json CMD`` works as ``memvault CMD --json``)."""
    return bool(value) or bool(getattr(ctx.find_root().obj, "as_json", False))


def json_option(help: str = "Print JSON for scripts.") -> Callable[[_F], _F]:  # noqa: A002 - click's own name
    """``--json``: machine-readable output (also given before the command: ``memvault --json CMD``)."""
    option: Callable[[_F], _F] = click.option("--json", "as_json", is_flag=True, callback=_json_flag, help=help)
    return option


#: The widest table a command prints when the terminal says nothing (not a terminal) or is wider.
MAX_TABLE_WIDTH: Final = 100


def table_width() -> int:
    """The terminal's width, at most :data:`MAX_TABLE_WIDTH` columns (``COLUMNS`` when set)."""
    return min(shutil.get_terminal_size((MAX_TABLE_WIDTH, 24)).columns, MAX_TABLE_WIDTH)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]], width: int | None = None) -> str:
    """A plain aligned text table; given ``width``, the last column wraps to fit it (the others are short)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    last = len(headers) - 1
    if width is not None and last > 0:
        room = width - sum(widths[:last]) - 2 * last
        widths[last] = min(widths[last], max(room, 20))
    lines = []
    for row in cells:
        tail = [row[last]]
        if width is not None:
            tail = textwrap.wrap(row[last], widths[last], break_on_hyphens=False) or [""]
        head = "  ".join(c.ljust(w) for c, w in zip(row[:last], widths[:last], strict=True))
        for index, piece in enumerate(tail):
            lead = head if index == 0 else " " * len(head)
            lines.append((lead + "  " + piece if last else piece).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class Context:
    def __init__(
        self, config: str | None, provider: str | None, options: tuple[str, ...], as_json: bool = False
    ) -> None:
        self.config = config
        self.provider = provider
        self.options = options
        self.as_json = as_json

    def open(self, *, scanner: str | None = None, read_only: bool = False) -> Vault:
        """Open the configured provider; ``scanner`` overrides the configured scanner (``"off"``).

        A command is short-lived: new lines are not embedded in the background here (they stay
        pending, durably, for a long-running vault or ``memvault reembed``; contract P37).
        ``read_only``: a command that only reads never creates the store: when the configured
        store's file or folder does not exist, raise instead of opening (which would create it).
        """
        settings: dict[str, Any] = dict(settings_from_pairs(self.options))
        if "config" in settings:
            raise InvalidRequest(
                "-o config=... is not a provider setting: pass the config file as `memvault --config PATH ...`",
                field="config",
            )
        config = load_config(self.config)
        if read_only:
            message = missing_store(config, self.provider, settings)
            if message:
                raise MemvaultError(message)
        if scanner is not None:
            settings["scanner"] = scanner
        settings["background_embedding"] = False
        settings["background_sweep"] = False
        return open_configured(config, self.provider, **settings)


#: The library names the fields of its request objects; the CLI's user typed these options.
_FLAGS: Final = (
    (re.compile(r"\bexactly one of id or data_subject_id\b"), "exactly one of --id or --subject"),
    (re.compile(r"\bworkspace_id\b"), "--workspace"),
    (re.compile(r"\bagent_id\b"), "--agent"),
    (re.compile(r"\bcrew_id\b"), "--crew"),
    (re.compile(r"\bdata_subject_id\b"), "--subject"),
    (re.compile(r"\bmode='(replace|append)'"), r"--mode \1"),
)
#: A message that starts with the field it is about, for the fields whose option has another name.
_LEADING: Final = {"key": "--key", "limit": "--limit", "tier": "--tier", "mode": "--mode", "id": "--id"}


def for_cli(exc: MemvaultError) -> str:
    """``exc``'s message in the words of the command line: its options, not the Python fields.

    The library's messages name request fields (``agent_id``, ``mode='replace'``); a CLI user
    typed ``--agent`` and ``--mode replace``. A 401 from a service says how to pass a token.
    """
    message = str(exc)
    for pattern, flag in _FLAGS:
        message = pattern.sub(flag, message)
    field = getattr(exc, "field", "")
    if isinstance(exc, InvalidRequest) and field in _LEADING and message.startswith(field + " "):
        message = _LEADING[field] + message[len(field) :]
    if isinstance(exc, Unauthorized):
        message += (
            ". Pass the service's token with `memvault -o token=TOKEN ...` "
            "(or `token` under [providers.http-remote] in memvault.toml)"
        )
    return message


def fail(exc: MemvaultError, *, as_flags: bool = True) -> None:
    """Print ``exc`` and exit (2 for invalid input, else 1).

    ``as_flags``: translate the request fields it names to the command's options
    (:func:`for_cli`); off where the fields are those of a file (``memvault import``).
    """
    click.echo(f"error: {for_cli(exc) if as_flags else exc}", err=True)
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
