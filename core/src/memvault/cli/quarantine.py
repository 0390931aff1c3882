"""Layer 7: ``memvault quarantine``: list, inspect and delete the copies the scanner kept (P30, P46).

``memvault quarantine list --workspace W`` prints one row per kept copy (oldest
first); ``memvault quarantine show --workspace W SHA256`` prints one copy with
the rule that fired and its content, with invisible characters made visible;
``memvault quarantine delete --workspace W SHA256`` deletes a reviewed copy.
All take ``--json``.

Layer 7. May import: every layer below, and :mod:`memvault.cli.common`
(:mod:`memvault.cli.main` imports this module and attaches its commands).
"""

from __future__ import annotations

import json
import sys

import click

from memvault.cli.common import Context, fail, json_option, render_table, skipped_unreadable
from memvault.contract.errors import MemvaultError
from memvault.contract.models import QuarantineRecord
from memvault.contract.wire import unstructure
from memvault.scanner.engine import DEFAULT_POLICY, scan
from memvault.scanner.plugin import BuiltinScanner
from memvault.scanner.quarantine import quarantine_record, quarantine_records

__all__ = ["quarantine"]


def _owner(record: QuarantineRecord) -> str:
    return f"crew:{record.crew_id}" if record.crew_id else f"agent:{record.agent_id}"


def _visible(text: str) -> str:
    """The text with every non-printable character but newline and tab shown as <U+XXXX>."""
    return "".join(
        ch if ch.isprintable() or ch in "\n\t" else f"<U+{ord(ch):04X}>" for ch in text.replace("\r\n", "\n")
    )


@click.group()
def quarantine() -> None:
    """Inspect content the scanner rejected (kept by providers with the 'quarantine' capability)."""


@quarantine.command("list")
@click.option("--workspace", "workspace_id", required=True, help="Workspace id.")
@json_option("Print JSON for scripts (content included).")
@click.pass_obj
def list_(obj: Context, workspace_id: str, as_json: bool) -> None:
    """List the quarantine copies of a workspace, oldest first.

    A copy the provider cannot read (a file edited by hand) is named in a warning
    line on stderr and the command exits 1; the others are listed all the same.
    """
    try:
        with obj.open(read_only=True) as vault, skipped_unreadable() as skipped:
            records = quarantine_records(vault, workspace_id)
    except MemvaultError as exc:
        fail(exc)
        return
    _print_records(workspace_id, records, as_json)
    for item in skipped:
        click.echo(f"warning: skipped {item.where}: {item}", err=True)
    if skipped:
        sys.exit(1)


def _print_records(workspace_id: str, records: list[QuarantineRecord], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps([unstructure(r) for r in records], indent=2, ensure_ascii=False))
        return
    if not records:
        click.echo(f"no quarantine copies in workspace {workspace_id}")
        return
    rows = [
        [
            r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            r.sha256[:16],
            _owner(r),
            r.label,
            r.category,
            r.pattern,
            len(r.content.encode("utf-8")),
        ]
        for r in records
    ]
    click.echo(render_table(["CREATED (UTC)", "SHA256", "OWNER", "DOCUMENT", "CATEGORY", "PATTERN", "BYTES"], rows))
    click.echo(f"{len(records)} cop{'y' if len(records) == 1 else 'ies'}; show one with: memvault quarantine show "
               f"--workspace {workspace_id} SHA256")  # fmt: skip


@quarantine.command("show")
@click.option("--workspace", "workspace_id", required=True, help="Workspace id.")
@click.argument("sha256")
@json_option()
@click.pass_obj
def show(obj: Context, workspace_id: str, sha256: str, as_json: bool) -> None:
    """Show one quarantine copy by SHA256 (or a unique prefix of 8+ hex digits)."""
    try:
        with obj.open(read_only=True) as vault:
            record = quarantine_record(vault, workspace_id, sha256)
            # "now" judges with the thresholds and allow-list the vault's scanner runs with ([scan]).
            plugins = vault.plugin_manager.get_plugins()
            policy = next((p.policy for p in plugins if isinstance(p, BuiltinScanner)), DEFAULT_POLICY)
    except MemvaultError as exc:
        fail(exc)
        return
    if record is None:
        click.echo(f"error: no quarantine copy {sha256} in workspace {workspace_id}", err=True)
        sys.exit(1)
    finding = scan(record.content, policy)
    if as_json:
        payload = unstructure(record)
        payload["finding"] = unstructure(finding) if finding is not None else None
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
        return
    lines = [
        f"sha256:    {record.sha256}",
        f"created:   {record.created_at.isoformat()}",
        f"workspace: {record.workspace_id}",
        f"owner:     {_owner(record)}",
        f"document:  {record.label}",
        f"rule:      {record.category} / {record.pattern}",
    ]
    if finding is not None:
        lines.append(f"now:       {finding.category} / {finding.pattern}, {finding.describe()}")
    else:
        lines.append("now:       the current rules find nothing in this copy")
    lines += [f"bytes:     {len(record.content.encode('utf-8'))}", "", _visible(record.content)]
    click.echo("\n".join(lines))


@quarantine.command("delete")
@click.option("--workspace", "workspace_id", required=True, help="Workspace id.")
@click.argument("sha256")
@json_option()
@click.pass_obj
def delete(obj: Context, workspace_id: str, sha256: str, as_json: bool) -> None:
    """Delete a reviewed quarantine copy by SHA256 (or a unique prefix of 8+ hex digits).

    Every copy of that body in the workspace goes, as an erasure removes text (contract P46);
    nothing else is touched. Review it first with `memvault quarantine show`.
    """
    try:
        with obj.open(read_only=True) as vault:
            record = quarantine_record(vault, workspace_id, sha256)
            if record is None:
                click.echo(f"error: no quarantine copy {sha256} in workspace {workspace_id}", err=True)
                sys.exit(1)
            deleted = vault.quarantine_delete(workspace_id, record.sha256)
    except MemvaultError as exc:
        fail(exc)
        return
    if as_json:
        click.echo(json.dumps({"workspace_id": workspace_id, "sha256": record.sha256, "deleted": deleted}))
        return
    copies = "copy" if deleted == 1 else "copies"
    click.echo(f"deleted {deleted} quarantine {copies} of {record.sha256} in workspace {workspace_id}")
