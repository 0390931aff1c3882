"""Deprecated: memvault 0.1.0's path of the hook specifications; removed in memvault 1.0.0.

They moved to :mod:`memvault.hooks` (one module per plugin manager:
:mod:`memvault.hooks.provider`, :mod:`memvault.hooks.registration`,
:mod:`memvault.hooks.lifecycle`). Importing this module warns once
(:class:`memvault.MemvaultRemovedIn1Warning`). The spec functions are this
module's own attributes, the same objects, because pluggy's ``add_hookspecs``
and ``vars()`` read a module's namespace directly.

May import: anything (an old path sits on top, like :mod:`memvault`); nothing imports it.
"""

from __future__ import annotations

from memvault.contract.deprecation import warn_moved
from memvault.hooks.lifecycle import (
    memvault_capture_compaction_requested,
    memvault_capture_turn_completed,
    memvault_recall_compaction_completed,
    memvault_recall_turn_started,
    memvault_tools,
)
from memvault.hooks.provider import (
    memvault_forget,
    memvault_health,
    memvault_list_documents,
    memvault_quarantine_get,
    memvault_quarantine_keep,
    memvault_quarantine_list,
    memvault_read,
    memvault_recall,
    memvault_retain,
)
from memvault.hooks.registration import (
    memvault_register_commands,
    memvault_register_providers,
    memvault_register_scanners,
)

__all__ = [
    "memvault_capture_compaction_requested",
    "memvault_capture_turn_completed",
    "memvault_forget",
    "memvault_health",
    "memvault_list_documents",
    "memvault_quarantine_get",
    "memvault_quarantine_keep",
    "memvault_quarantine_list",
    "memvault_read",
    "memvault_recall",
    "memvault_recall_compaction_completed",
    "memvault_recall_turn_started",
    "memvault_register_commands",
    "memvault_register_providers",
    "memvault_register_scanners",
    "memvault_retain",
    "memvault_tools",
]

warn_moved(
    __name__,
    "import the specs from memvault.hooks.provider, memvault.hooks.registration and memvault.hooks.lifecycle instead",
)
