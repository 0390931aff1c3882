"""memvault-postgres: the ``postgres`` provider (one PostgreSQL database, many processes and hosts).

Installing this distribution registers the provider; open it with
``memvault.open("postgres", dsn="postgresql://user@host/dbname")``.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from memvault.contract.errors import UpstreamError
from memvault.contract.registration import RegisterProvider
from memvault.hooks.markers import hookimpl
from memvault_postgres.provider import PostgresProvider

__all__ = ["PostgresProvider", "memvault_register_providers"]

#: The server ``memvault parity postgres`` and the scratch settings use: this
#: variable's connection string, else libpq's defaults and ``PG*`` variables.
DSN_ENV = "MEMVAULT_POSTGRES_DSN"


_SCRATCH_SCHEMA = re.compile(r"scratch_[0-9a-f]{20}")


def _scratch(tmp: Path) -> dict[str, Any]:
    # A fresh schema per call: an empty store on a shared server, never another run's data.
    return {"dsn": os.environ.get(DSN_ENV, ""), "schema": f"scratch_{uuid.uuid4().hex[:20]}"}


def _scratch_cleanup(settings: Mapping[str, Any]) -> None:
    """Drop the schema a scratch store made (and only such a schema): a parity run leaves nothing."""
    schema = str(settings.get("schema", ""))
    if not _SCRATCH_SCHEMA.fullmatch(schema):
        return
    try:
        with psycopg.connect(str(settings.get("dsn", "")), autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    except psycopg.Error as exc:
        raise UpstreamError(f"could not drop the scratch schema {schema!r}: {exc}; drop it by hand") from exc


@hookimpl
def memvault_register_providers(register: RegisterProvider) -> None:
    register(
        "postgres",
        PostgresProvider,
        capabilities=PostgresProvider.capabilities,
        scratch=_scratch,
        scratch_cleanup=_scratch_cleanup,
        description="PostgreSQL: many processes and hosts on one database, GIN full-text recall, erasure by subject",
        contract_version="1.3",  # the contract it is checked against (memvault parity --strict)
    )
