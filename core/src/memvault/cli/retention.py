"""Layer 7: ``memvault retention``: the retention policy, and the sweep on demand (contract P41-P45).

``memvault retention show`` prints the policy ``memvault.toml`` sets (per tier,
overridden per workspace), the background sweep's interval and the idempotency
window. ``memvault retention apply`` removes what has expired now (documents past
their expiry or their tier's retention, expired quarantine copies, idempotency
keys older than the window), printing progress on stderr and what went;
``--dry-run`` lists what would go and removes nothing. Both take ``--json``.

Layer 7. May import: every layer below, and :mod:`memvault.cli.common`
(:mod:`memvault.cli.main` imports this module and attaches its commands).
"""

from __future__ import annotations

import json
from typing import Any

import click

from memvault.cli.common import Context, fail, render_table
from memvault.config import load_config
from memvault.contract.errors import MemvaultError
from memvault.contract.models import DocumentInfo
from memvault.contract.retention import (
    RetentionPolicy,
    format_duration,
    idempotency_window_from,
    sweep_interval_from,
)
from memvault.contract.wire import unstructure

__all__ = ["retention"]


def _owner(doc: DocumentInfo) -> str:
    return f"crew:{doc.crew_id}" if doc.crew_id else f"agent:{doc.agent_id}"


def _when(doc: DocumentInfo) -> str:
    if doc.expires_at is not None:
        return doc.expires_at.strftime("%Y-%m-%d %H:%M:%S")
    return "past its tier's retention"


@click.group()
def retention() -> None:
    """Memory over time: the retention policy, and removing what has expired."""


@retention.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def show(obj: Context, as_json: bool) -> None:
    """Print the retention policy of memvault.toml: per tier, per workspace, and the sweep's settings."""
    try:
        config = load_config(obj.config)
        policy = RetentionPolicy.from_config(config.retention)
        interval = sweep_interval_from(config.retention)
        window = idempotency_window_from(config.idempotency)
    except MemvaultError as exc:
        fail(exc)
        return
    rows = policy.describe()
    if as_json:
        payload = {
            "tiers": {tier.value: format_duration(d) for tier, d in policy.tiers.items()},
            "workspaces": {
                ws: {tier.value: format_duration(d) for tier, d in tiers.items()}
                for ws, tiers in policy.workspaces.items()
            },
            "sweep_interval": format_duration(interval),
            "idempotency_window": format_duration(window),
        }
        click.echo(json.dumps(payload, indent=2))
        return
    lines = [render_table(("workspace", "tier", "kept for"), rows)] if rows else ["no retention: every tier keeps"]
    if not rows:
        lines[0] += " its documents until their own expiry (set [retention] in memvault.toml)"
    lines.append(f"background sweep every {format_duration(interval)}; idempotency keys kept {format_duration(window)}")
    click.echo("\n".join(lines))


@retention.command("apply")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def apply(obj: Context, dry_run: bool, as_json: bool) -> None:
    """Remove what has expired now, as erasure does: documents, quarantine copies, idempotency keys.

    Progress goes to stderr; the documents removed (or, with --dry-run, that would be)
    and a summary go to stdout. Exits 0 when the sweep ran, also when nothing had expired.
    """

    def progress(done: int) -> None:
        verb = "found" if dry_run else "removed"
        click.echo(f"retention: {done} document(s) {verb} so far", err=True)

    try:
        with obj.open(scanner="off") as vault:
            report = vault.sweep_expired(dry_run=dry_run, progress=progress)
    except MemvaultError as exc:
        fail(exc)
        return
    if as_json:
        payload: dict[str, Any] = {
            "dry_run": report.dry_run,
            "documents": [unstructure(doc) for doc in report.documents],
            "quarantine_removed": report.quarantine_removed,
            "keys_removed": report.keys_removed,
            "truncated": report.truncated,
            "seconds": round(report.seconds, 3),
        }
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
        return
    lines = []
    if report.documents:
        rows = [(d.workspace_id, _owner(d), d.label, d.bytes, _when(d)) for d in report.documents]
        lines.append(render_table(("workspace", "owner", "document", "bytes", "expired"), rows))
    counts = (
        f"{len(report.documents)} document(s), {report.quarantine_removed} quarantine copy(ies), "
        f"{report.keys_removed} idempotency key(s)"
    )
    if dry_run:
        more = " (and more: the list stops at the first 10,000)" if report.truncated else ""
        lines.append(f"dry run: would remove {counts}{more}; nothing was removed")
    else:
        lines.append(f"removed {counts} in {report.seconds:.2f} s")
    click.echo("\n".join(lines))
