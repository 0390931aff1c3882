"""memvault-postgres: the ``postgres`` provider (one PostgreSQL database, many processes and hosts).

Installing this distribution registers the provider; open it with
``memvault.open("postgres", dsn="postgresql://user@host/dbname")``.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from memvault.contract.registration import RegisterProvider
from memvault.hooks.markers import hookimpl
from memvault_postgres.provider import PostgresProvider

__all__ = ["PostgresProvider", "memvault_register_providers"]

#: The server ``memvault parity postgres`` and the scratch settings use: this
#: variable's connection string, else libpq's defaults and ``PG*`` variables.
DSN_ENV = "MEMVAULT_POSTGRES_DSN"


def _scratch(tmp: Path) -> dict[str, Any]:
    # A fresh schema per call: an empty store on a shared server, never another run's data.
    return {"dsn": os.environ.get(DSN_ENV, ""), "schema": f"scratch_{uuid.uuid4().hex[:20]}"}


@hookimpl
def memvault_register_providers(register: RegisterProvider) -> None:
    register(
        "postgres",
        PostgresProvider,
        capabilities=PostgresProvider.capabilities,
        scratch=_scratch,
        description="PostgreSQL: many processes and hosts on one database, GIN full-text recall, erasure by subject",
        contract_version="1.3",  # the contract it is checked against (memvault parity --strict)
    )
