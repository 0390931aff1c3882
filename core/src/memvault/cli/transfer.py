"""Layer 7: ``memvault export``, ``memvault import`` and ``memvault inspect``: move memory, and look at it.

``export`` writes a workspace (or everything) as a versioned JSON Lines file
(:mod:`memvault.transfer`); ``import`` reads one into the configured provider,
idempotently, and ``--verify`` compares every document afterwards; ``inspect``
lists documents with sizes, cap usage and last change. Progress goes to stderr,
results to stdout (``--json`` for scripts).

Layer 7. May import: every layer below, and :mod:`memvault.cli.common`
(:mod:`memvault.cli.main` imports this module and attaches its commands).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import click

from memvault.cli.common import Context, fail, json_option, render_table, skipped_unreadable, table_width
from memvault.contract.errors import InvalidRequest, MemvaultError
from memvault.contract.models import CAPS, DocumentInfo, ListDocumentsRequest, Tier
from memvault.contract.wire import unstructure
from memvault.transfer import count_documents, export_store, import_store, supports_listing, verify_import

__all__ = ["export", "import_", "inspect"]

_TIERS = [t.value for t in Tier]


class _Bar:
    """A click progress bar on stderr, created once the total is known."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label = label
        self.enabled = enabled
        self._bar: Any = None

    def total(self, count: int) -> None:
        if self.enabled and count:
            self._bar = click.progressbar(length=count, label=self.label, file=sys.stderr, show_pos=True)
            self._bar.__enter__()

    def step(self, count: int) -> None:
        if self._bar is not None:
            self._bar.update(count)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None


@contextlib.contextmanager
def _bar(label: str, enabled: bool) -> Iterator[_Bar]:
    bar = _Bar(label, enabled)
    try:
        yield bar
    finally:
        bar.close()


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[IO[str]]:
    """stdout, or a temporary file beside ``path`` renamed over it only when the export completed."""
    if path is None or path == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    target = Path(path)
    if target.is_dir():
        raise InvalidRequest(f"--output {path} is a directory: name a file", field="output")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent or ".")
    except OSError as exc:
        raise InvalidRequest(f"cannot write {path}: {exc.strerror or exc}", field="output") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@click.command()
@click.option("--workspace", "workspace_id", default="", help="Export this workspace (default: every workspace).")
@click.option("--output", "output", default=None, metavar="FILE", help="Write here (default: standard output).")
@click.option("--no-progress", is_flag=True, help="Do not draw the progress bar on stderr.")
@json_option("Print the summary as JSON (on stderr with no --output).")
@click.pass_obj
def export(obj: Context, workspace_id: str, output: str | None, no_progress: bool, as_json: bool) -> None:
    """Write memory as versioned JSON Lines: documents with bodies and subjects, and quarantine copies.

    The file is written under a temporary name and renamed when complete, so
    an interrupted export never leaves a partial FILE. Documents the provider
    withholds (a service's quarantined documents) are listed and exit 1.
    """
    try:
        with obj.open(scanner="off", read_only=True) as vault:
            supports_listing(vault)
            if workspace_id:
                ListDocumentsRequest(workspace_id=workspace_id)  # validate before creating the file
            with _bar("exporting", not no_progress) as bar, _output(output) as out, skipped_unreadable() as skipped:
                summary = export_store(vault, out, workspace_id=workspace_id, on_total=bar.total, progress=bar.step)
    except MemvaultError as exc:
        fail(exc)
        return
    for what in summary.withheld:
        click.echo(f"warning: not exported (the provider withholds its text): {what}", err=True)
    for item in skipped:
        click.echo(f"warning: not exported: {item.where}: {item}", err=True)
    text = f"exported {summary.documents} document(s), {summary.bytes} bytes, {summary.quarantine} quarantine cop" + (
        "y" if summary.quarantine == 1 else "ies"
    )
    if vault.embedding is not None:  # vectors are derived data (P40): the target embeds the text again
        text += "; no vectors (a vault recalling by meaning embeds the imported lines again)"
    to = sys.stderr if output is None or output == "-" else sys.stdout
    payload = unstructure(summary)
    if skipped:
        payload["skipped"] = [item.where for item in skipped]
    click.echo(json.dumps(payload, indent=2) if as_json else text, file=to)
    if summary.withheld or skipped:
        sys.exit(1)


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--verify", is_flag=True, help="Afterwards, compare every document byte for byte with the file.")
@click.option("--replace", is_flag=True, help="Overwrite documents the target holds with other content.")
@click.option(
    "--jobs",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Documents written at once (a provider that writes in groups, as sqlite does, takes lists of 64).",
)
@click.option("--no-progress", is_flag=True, help="Do not draw the progress bar on stderr.")
@json_option("Print the summary as JSON.")
@click.pass_obj
def import_(obj: Context, file: str, verify: bool, replace: bool, jobs: int, no_progress: bool, as_json: bool) -> None:
    """Read an export FILE ('-' for standard input) into the configured provider.

    Running it twice changes nothing. Every line is checked as a write would
    check it before anything is written: a malformed, truncated or
    newer-version file, a line a write would refuse (a bad id or subject, a
    body over its cap, a document on two lines), or a document the target
    holds with other content (without --replace) stops the import and leaves
    the target as it was. --replace overwrites before it forgets anything.
    """
    with _spooled(file) as (path, name):
        try:
            with obj.open(scanner="off") as vault:
                with _bar("importing", not no_progress) as bar:
                    summary = import_store(
                        vault, path, replace=replace, jobs=jobs, on_total=bar.total, progress=bar.step, name=name
                    )
                problems = []
                if verify:
                    with _bar("verifying", not no_progress) as bar:
                        bar.total(count_documents(path, name=name))
                        problems = verify_import(vault, path, progress=bar.step, name=name)
        except MemvaultError as exc:
            fail(exc, as_flags=False)  # the fields it names are the file's
            return
    payload: dict[str, Any] = unstructure(summary)
    if verify:
        payload["verify"] = {"ok": not problems, "problems": [unstructure(p) for p in problems]}
    if as_json:
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        lines = [
            f"imported {summary.written} document(s), re-tagged {summary.tagged}, {summary.unchanged} already "
            f"present; quarantine copies: {summary.quarantine_kept} kept, "
            f"{summary.quarantine_unchanged} already present"
        ]
        if summary.written and vault.embedding is not None:
            lines.append(
                f"{summary.written} document(s) wait to be embedded for recall by meaning (found by their words "
                "meanwhile): a running service does it in the background, or run `memvault reembed`"
            )
        lines += [f"not imported: {what}" for what in summary.not_imported]
        lines += [f"expired since the export, not imported: {what}" for what in summary.expired]
        if verify:
            lines.append("verify: every document matches" if not problems else f"verify: {len(problems)} problem(s)")
            lines += [f"  line {p.line}: {p.what}: {p.problem}" for p in problems]
        click.echo("\n".join(lines))
    if problems or summary.not_imported:
        sys.exit(1)


@contextlib.contextmanager
def _spooled(file: str) -> Iterator[tuple[Path, str]]:
    """A path to read twice and how messages name it: ``file`` itself, or standard input
    copied to a temporary file and named ``<stdin>``."""
    if file != "-":
        yield Path(file), file
        return
    with tempfile.TemporaryDirectory(prefix="memvault-import-") as tmp:
        path = Path(tmp) / "stdin.jsonl"
        with path.open("wb") as handle:
            shutil.copyfileobj(sys.stdin.buffer, handle)
        yield path, "<stdin>"


def _owner(doc: DocumentInfo) -> str:
    return f"crew:{doc.crew_id}" if doc.crew_id else f"agent:{doc.agent_id}"


def _usage(doc: DocumentInfo) -> tuple[int | None, float | None]:
    cap = CAPS[doc.tier]
    return cap, (None if cap is None else doc.bytes / cap)


@click.command()
@click.option("--workspace", "workspace_id", default="", help="Workspace id (default: every workspace).")
@click.option("--agent", "agent_id", default="", help="Only this agent's documents.")
@click.option("--crew", "crew_id", default="", help="Only this crew's documents.")
@click.option("--tier", type=click.Choice(_TIERS), default=None, help="Only this tier.")
@json_option()
@click.pass_obj
def inspect(obj: Context, workspace_id: str, agent_id: str, crew_id: str, tier: str | None, as_json: bool) -> None:
    """List documents with their size, cap usage, data subjects and last change.

    What the provider could not read (a tag file edited by hand) is named in a
    warning line on stderr (and under "skipped" with --json), and the command exits 1.
    """
    try:
        request = ListDocumentsRequest(workspace_id=workspace_id, agent_id=agent_id, crew_id=crew_id, tier=tier)
        with obj.open(read_only=True) as vault, skipped_unreadable() as skipped:
            documents = vault.list_documents(request).documents
    except MemvaultError as exc:
        fail(exc)
        return
    _print_documents(workspace_id, documents, as_json, [item.where for item in skipped])
    for item in skipped:
        click.echo(f"warning: skipped {item.where}: {item}", err=True)
    if skipped:
        sys.exit(1)


def _print_documents(workspace_id: str, documents: list[DocumentInfo], as_json: bool, skipped: list[str]) -> None:
    if as_json:
        rows = []
        for doc in documents:
            cap, used = _usage(doc)
            rows.append({**unstructure(doc), "cap": cap, "cap_used": None if used is None else round(used, 4)})
        payload: dict[str, object] = {"documents": rows}
        if skipped:
            payload["skipped"] = skipped
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
        return
    if not documents:
        click.echo("no documents" + (f" in workspace {workspace_id}" if workspace_id else ""))
        return
    table = []
    for doc in documents:
        cap, used = _usage(doc)
        table.append(
            [
                doc.workspace_id,
                _owner(doc),
                doc.label,
                doc.bytes,
                "-" if cap is None else cap,
                "-" if used is None else f"{used:.0%}",
                ",".join(doc.subjects) or "-",
                doc.updated_at.astimezone(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") if doc.updated_at else "-",
            ]
        )
    headers = ["WORKSPACE", "OWNER", "DOCUMENT", "BYTES", "CAP", "USED", "SUBJECTS", "UPDATED (UTC)"]
    click.echo(render_table(headers, table, table_width()))
    total = sum(doc.bytes for doc in documents)
    full = sum(1 for doc in documents if (_usage(doc)[1] or 0) >= 0.8)
    click.echo(
        f"{len(documents)} document(s), {total} bytes" + (f"; {full} at 80% of their cap or more" if full else "")
    )
