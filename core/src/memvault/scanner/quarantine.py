"""Layer 5: the scanner's quarantine side: the ``read`` placeholder and operator access to kept copies (P30).

May import: :mod:`memvault.contract` and :mod:`memvault.vault` (the facade).
"""

from __future__ import annotations

import re
from typing import Final

from memvault.contract.errors import InvalidRequest
from memvault.contract.models import Quarantine, QuarantineRecord, validate_identifier
from memvault.vault import Vault

__all__ = ["BLOCKED_PREFIX", "blocked_placeholder", "quarantine_record", "quarantine_records"]

#: The start of the placeholder ``read`` returns for a quarantined document.
BLOCKED_PREFIX: Final = "[BLOCKED:"


def blocked_placeholder(quarantine: Quarantine) -> str:
    """The text ``read`` returns instead of a quarantined document."""
    return (
        f"{BLOCKED_PREFIX} quarantined by the memvault scanner: category {quarantine.category}, "
        f"pattern {quarantine.pattern}, sha256 {quarantine.sha256}]"
    )


def quarantine_records(vault: Vault, workspace_id: str) -> list[QuarantineRecord]:
    """The quarantine copies a vault's provider kept for ``workspace_id``, oldest first.

    :raises NotSupported: when the provider keeps no quarantine copies.
    """
    validate_identifier(workspace_id, "workspace_id")
    return vault.quarantine_list(workspace_id)


def quarantine_record(vault: Vault, workspace_id: str, sha256: str) -> QuarantineRecord | None:
    """One quarantine copy by its sha256, or by a unique prefix of at least 8 hex digits.

    :raises InvalidRequest: for a malformed or ambiguous digest.
    :raises NotSupported: when the provider keeps no quarantine copies.
    """
    validate_identifier(workspace_id, "workspace_id")
    digest = sha256.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{8,64}", digest):
        raise InvalidRequest(
            f"sha256 {sha256[:80]!r} is not a hex digest: pass the 64 hex digits from ContentRejected "
            "or `memvault quarantine list` (a unique prefix of 8 or more also works)",
            field="sha256",
        )
    if len(digest) == 64:
        return vault.quarantine_get(workspace_id, digest)
    matches = [r for r in quarantine_records(vault, workspace_id) if r.sha256.startswith(digest)]
    if len(matches) > 1:
        raise InvalidRequest(
            f"sha256 prefix {digest!r} matches {len(matches)} quarantine copies: give more digits",
            field="sha256",
        )
    return matches[0] if matches else None
