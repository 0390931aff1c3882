"""Deprecated: memvault 0.1.0's path of the builtin scanner; removed in memvault 1.0.0.

It moved to :mod:`memvault.scanner`. Every name this module exported in memvault
0.1.0 still resolves to the same object, and the first use warns once
(:class:`memvault.MemvaultRemovedIn1Warning`) naming where to import it from. Import public names from :mod:`memvault`.

May import: anything (an old path sits on top, like :mod:`memvault`); nothing imports it.
"""

from __future__ import annotations

from memvault.contract.deprecation import forward

_MOVED = {
    **dict.fromkeys(("body_sha256",), "memvault.contract.models"),
    **dict.fromkeys(
        (
            "ADDRESSED",
            "CATEGORIES",
            "COMBINE_WINDOW",
            "DEFAULT_POLICY",
            "EXFILTRATION",
            "FOLDED_LANGUAGE_RULES",
            "Finding",
            "Hit",
            "INVISIBLE",
            "INVISIBLE_RULES",
            "OVERRIDE",
            "PATTERN_IDS",
            "ROLE",
            "RULES",
            "ScanPolicy",
            "TAIL_CONTEXT",
            "TOOL",
            "scan",
            "tail_start",
        ),
        "memvault.scanner.engine",
    ),
    **dict.fromkeys(("fold",), "memvault.scanner.normalise"),
    **dict.fromkeys(("BuiltinScanner", "CACHE_SIZE", "memvault_register_scanners"), "memvault.scanner.plugin"),
    **dict.fromkeys(
        ("BLOCKED_PREFIX", "blocked_placeholder", "quarantine_record", "quarantine_records"),
        "memvault.scanner.quarantine",
    ),
    **dict.fromkeys(("Rule",), "memvault.scanner.rules"),
}

__all__ = sorted(_MOVED)

__getattr__, __dir__ = forward(__name__, _MOVED)
