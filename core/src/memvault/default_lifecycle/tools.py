"""Layer 5: the memory tools the default lifecycle gives every ``memory`` slot (contract L12-L13).

``read``, ``write``, ``search`` and ``append_daily``, bound to the slot's
partition: no argument names a workspace, agent or scope.

May import: :mod:`memvault.contract`.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from collections.abc import Mapping
from typing import Any, Final

from memvault.contract.errors import InvalidRequest
from memvault.contract.lifecycle import LifecycleContext, Tool
from memvault.contract.models import MAX_RECALL_LIMIT, Capability, ReadRequest, RecallRequest, RetainRequest, Tier

__all__ = [
    "APPEND_DAILY_SCHEMA",
    "READ_SCHEMA",
    "SEARCH_SCHEMA",
    "WRITE_SCHEMA",
    "daily_line",
    "idempotency_key_for",
    "memory_tools",
]

#: Tiers a slot's tools can reach: the agent tiers of the slot's own partition.
_READ_TIERS: Final = [t.value for t in Tier if t.is_agent_tier]
_WRITE_TIERS: Final = [t for t in _READ_TIERS if t != Tier.LESSONS.value]


def idempotency_key_for(vault: object, base: str = "") -> str:
    """The idempotency key (P44) for one write through ``vault``: ``base`` (an operation id) when given, else a
    fresh ``mv-<uuid4>``; ``""`` when the vault's provider records no keys (a key would be ``NotSupported``).

    A write with a key is safe to repeat: a caller whose answer was lost (a dropped connection) tries again
    and the provider answers with the first result instead of writing twice. Over http-remote the client
    asks the service whether its provider records them (``honours_idempotency_keys``).
    """
    if Capability.IDEMPOTENT_WRITES not in getattr(vault, "capabilities", ()):
        return ""
    honours = getattr(getattr(vault, "provider", None), "honours_idempotency_keys", None)
    if callable(honours) and not honours():
        return ""
    return base or f"mv-{uuid.uuid4().hex}"


def daily_line(entry: str, now: _dt.datetime | None = None) -> str:
    """``- <RFC 3339 UTC time> — <entry>\\n``; line breaks in ``entry`` become spaces."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    stamp = now.astimezone(_dt.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    flat = " ".join(entry.split())
    return f"- {stamp} \u2014 {flat}\n"


_KEY_DOC: Final = "daily: YYYY-MM-DD (empty: today, UTC); peers: the peer's slug; other tiers: ignored"

READ_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "tier": {"type": "string", "enum": _READ_TIERS, "description": "the tier to read"},
        "key": {"type": "string", "maxLength": 128, "description": _KEY_DOC},
    },
    "required": ["tier"],
    "additionalProperties": False,
}
WRITE_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "tier": {"type": "string", "enum": _WRITE_TIERS, "description": "the tier to write (lessons is read-only)"},
        "key": {"type": "string", "maxLength": 128, "description": _KEY_DOC},
        "content": {"type": "string", "minLength": 1, "description": "the text to store"},
        "mode": {"type": "string", "enum": ["replace", "append"], "description": "overwrite or add to the end"},
    },
    "required": ["tier", "content", "mode"],
    "additionalProperties": False,
}
SEARCH_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "q": {"type": "string", "minLength": 1, "description": "what to look for (words or a question)"},
        "tier": {"type": "string", "enum": _READ_TIERS, "description": "only this tier (omit: every tier)"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RECALL_LIMIT, "description": "at most this many"},
    },
    "required": ["q"],
    "additionalProperties": False,
}
APPEND_DAILY_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"entry": {"type": "string", "minLength": 1, "description": "one line for today's log"}},
    "required": ["entry"],
    "additionalProperties": False,
}


def memory_tools(ctx: LifecycleContext) -> list[Tool]:
    """``read``, ``write``, ``search`` and ``append_daily`` bound to ``ctx``'s partition (L12-L13)."""
    vault, workspace, agent = ctx.vault, ctx.workspace_id, ctx.agent_id

    def read(args: Mapping[str, Any]) -> dict[str, Any]:
        result = vault.read(
            ReadRequest(workspace_id=workspace, agent_id=agent, tier=args["tier"], key=args.get("key", ""))
        )
        return {"id": result.id, "content": result.content, "quarantined": result.quarantined}

    def write(args: Mapping[str, Any]) -> dict[str, Any]:
        result = vault.retain(
            RetainRequest(
                workspace_id=workspace,
                agent_id=agent,
                tier=args["tier"],
                key=args.get("key", ""),
                content=args["content"],
                mode=args["mode"],
                idempotency_key=idempotency_key_for(vault),
            )
        )
        return {"id": result.id, "bytes": result.bytes, "warning": result.warning}

    def search(args: Mapping[str, Any]) -> dict[str, Any]:
        result = vault.recall(
            RecallRequest(
                workspace_id=workspace,
                agent_id=agent,
                query=args["q"],
                tier=args.get("tier"),
                limit=args.get("limit", 5),
            )
        )
        hits = [{"source": h.source, "line": h.line, "snippet": h.snippet, "score": h.score} for h in result.hits]
        return {"hits": hits, "quarantined": list(result.quarantined)}

    def append_daily(args: Mapping[str, Any]) -> dict[str, Any]:
        if not args["entry"].strip():
            raise InvalidRequest("argument 'entry' must contain a non-space character", field="entry")
        result = vault.retain(
            RetainRequest(
                workspace_id=workspace,
                agent_id=agent,
                tier=Tier.DAILY,
                content=daily_line(args["entry"]),
                mode="append",
                idempotency_key=idempotency_key_for(vault),
            )
        )
        return {"id": result.id, "bytes": result.bytes, "warning": result.warning}

    return [
        Tool(name="read", description="Read one whole memory document.", input_schema=READ_SCHEMA, handler=read),
        Tool(
            name="write",
            description="Write a memory document (replace it, or append to it).",
            input_schema=WRITE_SCHEMA,
            handler=write,
        ),
        Tool(
            name="search",
            description="Search memory; returns matching lines, best first.",
            input_schema=SEARCH_SCHEMA,
            handler=search,
        ),
        Tool(
            name="append_daily",
            description="Add a time-stamped line to today's log.",
            input_schema=APPEND_DAILY_SCHEMA,
            handler=append_daily,
        ),
    ]
