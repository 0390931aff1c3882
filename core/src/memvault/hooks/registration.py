"""Registration hooks, called once on the registry's plugin manager when plugins load.

Holds only hook specifications. May import: :mod:`memvault.contract` and
:mod:`memvault.hooks.markers` (and click, for type checking only).

The interface is append-only (contract D4): new hooks and new optional
arguments may be added, nothing is removed or renamed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memvault.contract.embedding import RegisterEmbedder
from memvault.contract.registration import RegisterProvider, RegisterScanner
from memvault.hooks.markers import hookspec

if TYPE_CHECKING:
    import click


@hookspec
def memvault_register_providers(register: RegisterProvider) -> None:
    """Register the providers this plugin offers.

    Call ``register(name, factory, capabilities=..., scratch=..., checks=...)``
    once per provider. A name another plugin already registered is an error
    naming both plugins; nothing is renamed. ``checks`` (optional) are the
    provider's own read-only checks of a configured store, which
    ``memvault doctor`` runs (see :data:`memvault.StoreChecks`).

    :param register: the callback that records one provider; see
        :class:`memvault.RegisterProvider`.
    :return: nothing.
    """


@hookspec
def memvault_register_commands(cli: click.Group) -> None:
    """Add commands to the ``memvault`` command line.

    :param cli: the root click group; call ``cli.add_command(...)``.
    :return: nothing.
    """


@hookspec
def memvault_register_scanners(register: RegisterScanner) -> None:
    """Register content scanners that vaults can use (``scanner = "NAME"`` in config).

    Call ``register(name, factory)``; ``factory()`` (or ``factory(policy=table)``
    when it takes ``policy`` and ``[scan]`` is configured) returns a plugin object
    whose ``@hookimpl(wrapper=True)`` methods wrap the provider verbs.

    :param register: the callback that records one scanner.
    :return: nothing.
    """


@hookspec
def memvault_register_embedders(register: RegisterEmbedder) -> None:
    """Register text embedders that vaults can recall by meaning with (contract P36).

    Call ``register(name, factory, description=...)`` once per embedder; ``factory(**settings)``
    (the ``[embed]`` table's keys other than ``embedder``) returns a
    :class:`memvault.Embedder`. A name another plugin already registered is an error
    naming both plugins. Added after the first release: optional.

    :param register: the callback that records one embedder.
    :return: nothing.
    """


@hookspec
def memvault_vault_plugins() -> list[object]:
    """Plugins every vault registers around its provider (the core's default lifecycle uses it).

    Called each time a vault is built; return fresh objects whose
    ``@hookimpl`` methods implement provider-verb wrappers (audit, metrics) or
    lifecycle phases (with ``trylast=True`` to stay a default). One with a
    ``bind_vault(vault)`` method is handed the vault once registered.

    :return: the plugin objects, fresh for this vault.
    """
