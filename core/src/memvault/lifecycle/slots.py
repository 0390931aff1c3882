"""Layer 6: slots (a named memory bound to a vault and a scope) and locked scopes (contract L1, L5).

May import: :mod:`memvault.contract`, :mod:`memvault.vault` (the facade) and
:mod:`memvault.lifecycle.scopes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from attrs import field, frozen

from memvault.contract.errors import InvalidRequest
from memvault.contract.lifecycle import SlotOptions
from memvault.contract.models import validate_identifier
from memvault.lifecycle.scopes import (
    NamespaceSpec,
    Scope,
    ScopeResolver,
    Visibility,
    check_slot_name,
    namespace_bytes,
)
from memvault.vault import AsyncVault, Vault

__all__ = ["LockedScope", "Slot"]


def _unwrap_vault(value: object) -> Vault:
    if isinstance(value, AsyncVault):
        return value.vault
    if isinstance(value, Vault):
        return value
    raise InvalidRequest(
        f"a slot's vault must be a memvault.Vault or AsyncVault, got {type(value).__name__} (L1)", field="vault"
    )


def _slot_name(instance: object, attribute: Any, value: Any) -> None:
    check_slot_name(value)


def _visibility(instance: object, attribute: Any, value: Any) -> None:
    if value not in ("scope", "session"):
        raise InvalidRequest(f"visibility {value!r} is not 'scope' or 'session' (L1)", field="visibility")


def _resolver(instance: object, attribute: Any, value: Any) -> None:
    if not callable(value):
        raise InvalidRequest(
            "scope must be a resolver: by_principal, by_session, by_value(...) or a callable (L1)", field="scope"
        )


def _namespace_spec(instance: object, attribute: Any, value: Any) -> None:
    if value is None or callable(value):
        return
    namespace_bytes(value)


def _workspace(instance: object, attribute: Any, value: Any) -> None:
    validate_identifier(value, "workspace_id", required=False)


@frozen(kw_only=True)
class Slot:
    """A named memory bound to a provider and a scope resolver (L1).

    :param name: ``[A-Za-z][A-Za-z0-9_-]*``; tools are exposed as ``<name>__<tool>``.
    :param description: what this memory is for; prepended to every tool description.
    :param vault: the provider (a :class:`~memvault.Vault`, or an ``AsyncVault``).
    :param scope: the resolver: :func:`by_principal`, :func:`by_session`,
        :func:`by_value` or any callable ``(ScopeContext) -> scope | None``.
    :param namespace: optional; a string or a callable resolved after the scope.
    :param visibility: ``scope`` (shared by every session with the same scope)
        or ``session`` (also keyed by the session id).
    :param workspace_id: the workspace of the slot's partition (default: the runtime's).
    :param capture: opt in to the default ``turn.completed`` capture into today's daily document.
    :param kind: ``memory`` (recall/capture/memory tools) or ``notes`` (numbered notes, L14).
    :param recall_limit: hits the default turn-start recall asks for (1..20).
    :param settings: anything else for third-party lifecycle hooks, in ``ctx.options.settings``.
    """

    name: str = field(validator=_slot_name)
    description: str
    vault: Vault = field(converter=_unwrap_vault)
    scope: ScopeResolver = field(validator=_resolver)
    namespace: NamespaceSpec = field(default=None, validator=_namespace_spec)
    visibility: Visibility = field(default="scope", validator=_visibility)
    workspace_id: str = field(default="", validator=_workspace)
    capture: bool = False
    kind: Literal["memory", "notes"] = "memory"
    recall_limit: int = 5
    settings: Mapping[str, Any] = field(factory=dict)
    #: What the slot's lifecycle hooks see as ``ctx.options`` (validated here, at configuration time).
    options: SlotOptions = field(init=False)

    @options.default
    def _options(self) -> SlotOptions:
        return SlotOptions(
            kind=self.kind, capture=self.capture, recall_limit=self.recall_limit, settings=dict(self.settings)
        )


@frozen(kw_only=True)
class LockedScope:
    """A slot's scope as resolved and locked for one turn (L5): its key is its partition."""

    slot: str
    scope: Scope
    namespace: str | None
    scope_key: str
    workspace_id: str
    turn: int | None
