"""Deprecated: memvault 0.1.0's path of the memory tools; removed in memvault 1.0.0.

It moved to :mod:`memvault.lifecycle.tools`. Every name this module exported in memvault
0.1.0 still resolves to the same object, and the first use warns once
(:class:`memvault.MemvaultRemovedIn1Warning`) naming where to import it from. Import public names from :mod:`memvault`.

May import: anything (an old path sits on top, like :mod:`memvault`); nothing imports it.
"""

from __future__ import annotations

from memvault.contract.deprecation import forward

_MOVED = {
    **dict.fromkeys(
        ("APPEND_DAILY_SCHEMA", "READ_SCHEMA", "SEARCH_SCHEMA", "WRITE_SCHEMA", "daily_line", "memory_tools"),
        "memvault.default_lifecycle.tools",
    ),
    **dict.fromkeys(
        (
            "ToolResult",
            "ToolSet",
            "bind_slot_tools",
            "to_anthropic",
            "to_mcp",
            "to_openai",
            "validate_arguments",
            "validate_tool_name",
        ),
        "memvault.lifecycle.tools",
    ),
}

__all__ = sorted(_MOVED)

__getattr__, __dir__ = forward(__name__, _MOVED)
