"""Deprecated: memvault 0.1.0's path of the request and result types, enums, caps and labels; removed in memvault 1.0.0.

It moved to :mod:`memvault.contract.models`. Every name this module exported in memvault
0.1.0 still resolves to the same object, and the first use warns once
(:class:`memvault.MemvaultRemovedIn1Warning`) naming where to import it from. Import public names from :mod:`memvault`.

May import: anything (an old path sits on top, like :mod:`memvault`); nothing imports it.
"""

from __future__ import annotations

from memvault.contract.deprecation import forward

_MOVED = {
    **dict.fromkeys(
        (
            "CAPS",
            "Capability",
            "DocumentInfo",
            "DocumentRef",
            "ForgetRequest",
            "ForgetResult",
            "HealthStatus",
            "ListDocumentsRequest",
            "ListDocumentsResult",
            "MAX_QUERY_BYTES",
            "MAX_QUERY_TERMS",
            "MAX_RECALL_LIMIT",
            "MAX_SNIPPET_CHARS",
            "Mode",
            "Partition",
            "Quarantine",
            "QuarantineRecord",
            "ReadRequest",
            "ReadResult",
            "RecallRequest",
            "RecallResult",
            "RecallSnippet",
            "RetainRequest",
            "RetainResult",
            "Tier",
            "cap_warning",
            "check_cap",
            "label_for",
            "parse_label",
            "today_utc",
            "validate_identifier",
            "validate_sha256",
            "validate_text",
        ),
        "memvault.contract.models",
    ),
}

__all__ = sorted(_MOVED)

__getattr__, __dir__ = forward(__name__, _MOVED)
