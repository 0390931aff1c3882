"""memvault provider ``local-disk``: markdown files under a root folder, atomic and crash-safe.

Open it with ``memvault.open("local-disk", root="/var/lib/memvault")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memvault.contract.registration import RegisterProvider
from memvault.hooks.markers import hookimpl
from memvault_local_disk.provider import LocalDiskProvider

__all__ = ["LocalDiskProvider", "memvault_register_providers"]


def _scratch(tmp: Path) -> dict[str, Any]:
    # An empty, existing folder: health reports a missing root as not ok (P27).
    root = tmp / "memory"
    root.mkdir(mode=0o700, exist_ok=True)
    return {"root": str(root)}


@hookimpl
def memvault_register_providers(register: RegisterProvider) -> None:
    register(
        "local-disk",
        LocalDiskProvider,
        capabilities=LocalDiskProvider.capabilities,
        scratch=_scratch,
        description="markdown files under a root folder; atomic writes, cross-process locks, hand-editable",
        contract_version="1.3",  # the contract it is checked against (memvault parity --strict)
    )
