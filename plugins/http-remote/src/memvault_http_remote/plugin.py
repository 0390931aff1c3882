"""The entry point module (group ``memvault``): the ``http-remote`` provider and the CLI commands."""

from __future__ import annotations

import click

from memvault.contract.models import Capability
from memvault.contract.registration import RegisterProvider
from memvault.hooks.markers import hookimpl
from memvault_http_remote.client import HttpRemoteProvider

__all__ = ["CAPABILITIES"]

#: Declared statically (the registry needs them before any URL is known):
#: ``scans_upstream``: the service scans every write and read, so a client vault runs
#: no scanner of its own unless asked. ``remote`` and ``multi_process`` hold for the transport itself (any number of
#: client processes share the server's store); ``cascade_forget``,
#: ``quarantine`` and ``list_documents`` are passed through to the server's
#: provider, which answers ``NotSupported`` (or no quarantine copy) when it lacks them. Serve a provider
#: that has both (sqlite, memory) for full parity; ``GET /v1/capabilities``
#: tells what the server's provider declares. ``expiry`` and ``idempotent_writes`` are passed through
#: the same way: the client asks the service once whether its provider records idempotency keys, sends
#: a key only then (generating one for a retain without), and raises ``NotSupported`` for a caller's key
#: otherwise; callers that generate keys ask it too (``honours_idempotency_keys``).
CAPABILITIES = frozenset(
    {
        Capability.REMOTE,
        Capability.SCANS_UPSTREAM,
        Capability.MULTI_PROCESS,
        Capability.CASCADE_FORGET,
        Capability.QUARANTINE,
        Capability.LIST_DOCUMENTS,
        Capability.EXPIRY,
        Capability.IDEMPOTENT_WRITES,
    }
)


@hookimpl
def memvault_register_providers(register: RegisterProvider) -> None:
    register(
        "http-remote",
        HttpRemoteProvider,
        capabilities=CAPABILITIES,
        scratch=None,  # a scratch instance would need a server: pass --option url=... --option token=...
        description="client of a `memvault serve` service over HTTP "
        "(settings: url, token, timeout, batch_max, retry_deadline)",
        contract_version="1.3",  # the contract it is checked against (memvault parity --strict)
    )


@hookimpl
def memvault_register_commands(cli: click.Group) -> None:
    from memvault_http_remote.commands import serve, token

    cli.add_command(serve)
    cli.add_command(token)
