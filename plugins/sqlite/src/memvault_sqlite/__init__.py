"""memvault-sqlite: the ``sqlite`` provider (one database file, WAL, FTS5 at line level).

Installing this distribution registers the provider; open it with
``memvault.open("sqlite", path="memory.db")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memvault.contract.registration import RegisterProvider
from memvault.hooks.markers import hookimpl
from memvault_sqlite.checks import store_checks
from memvault_sqlite.provider import SqliteProvider

__all__ = ["SqliteProvider", "memvault_register_providers"]


def _scratch(tmp: Path) -> dict[str, Any]:
    return {"path": str(tmp / "memvault.db")}


@hookimpl
def memvault_register_providers(register: RegisterProvider) -> None:
    register(
        "sqlite",
        SqliteProvider,
        capabilities=SqliteProvider.capabilities,
        scratch=_scratch,
        description="one SQLite file: WAL, line-level FTS5 index, erasure by data subject",
        checks=store_checks,
        contract_version="1.3",  # the contract it is checked against (memvault parity --strict)
    )
