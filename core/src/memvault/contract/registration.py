"""Layer 1: the callbacks a plugin's registration hooks receive.

``memvault_register_providers(register)`` gets a :class:`RegisterProvider`,
``memvault_register_scanners(register)`` a :class:`RegisterScanner`; the
registry (:mod:`memvault.registry`) supplies them.

May import: nothing of memvault.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from attrs import frozen

__all__ = ["DoctorCheck", "RegisterProvider", "RegisterScanner", "ScratchCleanup", "ScratchSettings", "StoreChecks"]

#: Scratch settings: given an empty temporary directory, the settings that open
#: a fresh, empty provider there (used by ``memvault parity`` and the suite).
ScratchSettings = Callable[[Path], Mapping[str, Any]]

#: Removes what a scratch store left outside its temporary directory (a database schema,
#: a bucket), given the settings :data:`ScratchSettings` returned; called after the test
#: (or ``memvault parity`` run) that used them, with every vault on them closed.
ScratchCleanup = Callable[[Mapping[str, Any]], None]


@frozen
class DoctorCheck:
    """One finding of ``memvault doctor``: a name, ``ok``/``warn``/``fail``, what was found, how to fix it."""

    name: str
    status: Literal["ok", "warn", "fail"]
    detail: str
    fix: str = ""


#: A provider's own read-only checks of its configured store, for ``memvault doctor``:
#: given the provider's settings as configured, the findings (schema version,
#: integrity, ...). They run before the doctor opens the store, and must never create
#: or change anything (the doctor only looks).
StoreChecks = Callable[[Mapping[str, Any]], Iterable[DoctorCheck]]


class RegisterProvider(Protocol):
    """The callback passed to ``memvault_register_providers``."""

    def __call__(
        self,
        name: str,
        factory: Callable[..., object],
        *,
        capabilities: Iterable[str] = (),
        scratch: ScratchSettings | None = None,
        description: str = "",
        checks: StoreChecks | None = None,
        contract_version: str | None = None,
        scratch_cleanup: ScratchCleanup | None = None,
    ) -> None:
        """Record one provider.

        :param name: the provider name users put in config (``[a-z][a-z0-9_-]*``).
        :param factory: called with the provider's settings as keyword arguments;
            returns the provider instance (a pluggy plugin with the verb hooks).
        :param capabilities: optional capabilities it declares (:class:`Capability`).
        :param scratch: builds settings for a fresh, empty instance in a temporary
            directory, so ``memvault parity NAME`` works with no options.
        :param description: one line for ``memvault providers``.
        :param checks: its own read-only checks of a configured store, which
            ``memvault doctor`` runs for it (optional, added after the first release).
        :param contract_version: the version of docs/reference/contract.md the provider
            was written for, e.g. ``"1.3"`` (:data:`memvault.CONTRACT_VERSION` is the
            newest); ``None``: ``"1.0"``, the first. ``memvault parity`` holds it to every
            line up to that version and lists newer lines it misses without failing it.
        :param scratch_cleanup: removes what a ``scratch`` store left outside its
            temporary directory (a schema on a shared server), given its settings; the
            parity suite calls it after each test, so a run leaves nothing behind.
        """


class RegisterScanner(Protocol):
    """The callback passed to ``memvault_register_scanners``."""

    def __call__(self, name: str, factory: Callable[..., object]) -> None:
        """Record one scanner.

        :param name: the name configuration selects it by (``scanner = "NAME"``).
        :param factory: returns a fresh plugin object wrapping the provider verbs. A
            factory with a ``policy`` keyword receives the ``[scan]`` table of
            ``memvault.toml`` (a mapping) when one is configured.
        """
