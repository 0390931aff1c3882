"""The memory the MCP server exposes, independent of the transport.

A :class:`MemoryService` holds the configured slots (each a
:class:`memvault.lifecycle.Slot`) and answers for a :class:`Caller`: the
caller's principal and session decide every slot's scope, exactly as an
in-process agent loop's :meth:`~memvault.lifecycle.Runtime.session` would, and
the tools are the slots' own (``<slot>__read``, ``<slot>__write``, ...), built
by the lifecycle runtime and bound to the locked partition. No tool argument
names a workspace, an agent or a scope, so a model cannot reach another
partition; over HTTP the principal comes from the bearer token, never from a
request field.

Everything here is synchronous (the vaults are); the server runs it in worker
threads.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote, unquote

from attrs import frozen

import memvault
from memvault import InvalidRequest, MemvaultError
from memvault.lifecycle import Runtime, Slot, TurnStart, by_principal, by_session, by_value
from memvault.lifecycle.tools import ToolResult
from memvault_mcp.config import ServerConfig, SlotConfig

__all__ = ["URI_SCHEME", "Caller", "MemoryService", "Resource", "ResourceTemplate", "open_slots"]

log = logging.getLogger("memvault.mcp")

URI_SCHEME: Final = "memvault"
#: Tiers with one document per partition, listed as resources (daily: today's).
_LISTED_TIERS: Final = ("AGENT", "PERSONA", "pins", "lessons", "daily")
_KEYED_TIERS: Final = ("daily", "peers")
_READ_TIERS: Final = ("AGENT", "PERSONA", "pins", "daily", "peers", "lessons")
#: Turn starts (tool sets) kept per (slot, principal, session).
_CACHE_SIZE: Final = 1024


def _allow_all(workspace_id: str) -> bool:
    return True


@frozen(kw_only=True)
class Caller:
    """Who is asking: the principal (scope of by-principal slots), the session, the workspaces allowed.

    :param principal: ``None`` is anonymous: by-principal slots are disabled for it.
    :param session_id: the MCP session (scope of by-session slots and of ``visibility = "session"``).
    :param allows: whether the caller may touch a workspace (a token's binding; stdio: all).
    """

    principal: str | None
    session_id: str
    allows: Callable[[str], bool] = _allow_all


@frozen(kw_only=True)
class Resource:
    """One document a caller can read: ``memvault://<slot>/<tier>[/<key>]``."""

    uri: str
    name: str
    title: str
    description: str
    mime_type: str = "text/markdown"


@frozen(kw_only=True)
class ResourceTemplate:
    """A family of documents addressed by key (a day's log, a peer's notes)."""

    uri_template: str
    name: str
    description: str
    mime_type: str = "text/markdown"


def _resolver(slot: SlotConfig) -> Callable[[Any], Any]:
    if slot.scope == "principal":
        return by_principal
    if slot.scope == "session":
        return by_session
    return by_value(slot.value)


def open_slots(
    config: ServerConfig,
    *,
    memvault_config: str | None = None,
    default_provider: str | None = None,
    default_options: Mapping[str, Any] | None = None,
) -> tuple[list[Slot], list[memvault.Vault]]:
    """Open each slot's vault (slots with the same provider and options share one) and build the slots.

    A slot without ``provider`` uses ``default_provider`` with ``default_options``
    (the CLI's ``--provider`` / ``--option``) when given, else the provider of
    ``memvault_config`` (a ``memvault.toml``) with ``default_options`` over its settings.

    :return: the slots and the vaults to close.
    :raises MemvaultError: a provider that cannot be opened (nothing stays open).
    """
    vaults: dict[tuple[str, str], memvault.Vault] = {}
    slots: list[Slot] = []
    try:
        for spec in config.slots:
            options = dict(spec.options) if spec.provider else {**(default_options or {}), **spec.options}
            provider = spec.provider or default_provider or ""
            key = (provider, repr(sorted(options.items())))
            if key not in vaults:
                if provider:
                    vaults[key] = memvault.open(provider, **options)
                else:
                    vaults[key] = memvault.open_from_config(memvault_config, **options)
            slots.append(
                Slot(
                    name=spec.name,
                    description=spec.description,
                    vault=vaults[key],
                    scope=_resolver(spec),
                    namespace=spec.namespace,
                    visibility=spec.visibility,
                    workspace_id=spec.workspace,
                    kind=spec.kind,
                    recall_limit=spec.recall_limit,
                )
            )
    except BaseException:
        for vault in vaults.values():
            vault.close()
        raise
    return slots, list(vaults.values())


def _error(message: str, error: str = "InvalidRequest") -> ToolResult:
    return ToolResult(ok=False, content=message, error=error)


class MemoryService:
    """The slots, served to callers: tools, tool calls and documents as resources.

    :param slots: the slots (names unique).
    :param workspace_id: the workspace of a slot that names none.
    """

    def __init__(self, slots: Iterable[Slot], *, workspace_id: str = "default") -> None:
        self.slots: tuple[Slot, ...] = tuple(slots)
        # One runtime per slot: a slot whose recall fails (a provider outage) must not
        # take the other slots' tools with it, as one all-or-nothing turn start would.
        Runtime(self.slots, workspace_id=workspace_id)  # validates names and the workspace once
        self._runtimes = {s.name: Runtime([s], workspace_id=workspace_id) for s in self.slots}
        self.workspace_id = workspace_id
        self._cache: OrderedDict[tuple[str, str | None, str], TurnStart] = OrderedDict()
        self._lock = threading.Lock()

    def workspace_of(self, slot: Slot) -> str:
        return slot.workspace_id or self.workspace_id

    def _visible(self, caller: Caller) -> list[Slot]:
        return [s for s in self.slots if caller.allows(self.workspace_of(s))]

    def _start(self, caller: Caller, slot: Slot, *, fresh: bool = False) -> TurnStart:
        """The slot's scope locked for the caller, its tools bound to that partition.

        :raises MemvaultError: the scope is invalid, or the slot's recall failed (``TurnFailed``).
        """
        # A slot whose partition does not depend on the session is cached across sessions: over
        # stateless HTTP every request is a new session, and a notes slot's turn start reads the store.
        per_session = slot.visibility == "session" or slot.scope is by_session
        key = (slot.name, caller.principal, caller.session_id if per_session else "")
        if not fresh:
            with self._lock:
                start = self._cache.get(key)
                if start is not None:
                    self._cache.move_to_end(key)
                    return start
        session = self._runtimes[slot.name].session(caller.session_id, principal=caller.principal)
        start = session.turn_started(0, "")
        with self._lock:
            self._cache[key] = start
            self._cache.move_to_end(key)
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return start

    # -- tools ---------------------------------------------------------------

    def list_tools(self, caller: Caller) -> list[dict[str, Any]]:
        """The caller's tools in MCP ``tools/list`` form (``name``, ``description``, ``inputSchema``).

        A slot whose scope is disabled for the caller (anonymous, say) has no
        tools; a slot whose provider fails is logged and left out of this list.
        """
        tools: list[dict[str, Any]] = []
        for slot in self._visible(caller):
            tools.extend(self.slot_tools(caller, slot))
        return tools

    def visible_slots(self, caller: Caller) -> list[Slot]:
        """The slots served to ``caller`` (those on a workspace its token may touch)."""
        return self._visible(caller)

    def slot_tools(self, caller: Caller, slot: Slot) -> list[dict[str, Any]]:
        """One slot's part of :meth:`list_tools` (none when its provider fails, which is logged)."""
        try:
            return self._start(caller, slot).tools.to_mcp()
        except MemvaultError as exc:
            log.warning("slot %r left out of tools/list: %s: %s", slot.name, type(exc).__name__, exc)
            return []

    def call_tool(self, caller: Caller, name: str, arguments: object) -> ToolResult:
        """Run one tool call; never raises: every failure is an error :class:`ToolResult`."""
        try:
            for slot in self._visible(caller):
                if not name.startswith(f"{slot.name}__"):
                    continue
                start = self._start(caller, slot)
                if start.tools.get(name) is not None:
                    return start.tools.call(name, arguments)
            known = ", ".join(t["name"] for t in self.list_tools(caller)) or "none"
            return _error(f"unknown tool {name!r}; available tools: {known}", "UnknownTool")
        except MemvaultError as exc:
            return _error(str(exc), type(exc).__name__)
        except Exception as exc:
            log.exception("tool %s failed", name)
            return _error(f"tool {name!r} failed: {type(exc).__name__}: {exc}", "ToolError")

    # -- resources -----------------------------------------------------------

    def list_resources(self, caller: Caller) -> list[Resource]:
        """The caller's non-empty documents, slot by slot: the one-document tiers and today's log.

        A notes slot lists its notebook. Days' logs and peers' documents are
        reachable through :meth:`list_templates` (the provider verbs cannot
        enumerate keys).
        """
        found: list[Resource] = []
        today = _dt.datetime.now(_dt.timezone.utc).date().isoformat()
        for slot in self._visible(caller):
            try:
                start = self._start(caller, slot)
            except MemvaultError as exc:
                log.warning("slot %r left out of resources/list: %s: %s", slot.name, type(exc).__name__, exc)
                continue
            if not self._scope_enabled(start, slot):
                continue  # disabled for this caller (anonymous, say): no documents
            if slot.kind == "notes":
                found.append(self._resource(slot, "notes", "", "notes", "The numbered notebook."))
                continue
            for tier in _LISTED_TIERS:
                key = today if tier == "daily" else ""
                result = start.tools.call(f"{slot.name}__read", {"tier": tier, "key": key})
                if not result.ok:
                    log.warning("slot %r left out of resources/list: %s: %s", slot.name, result.error, result.content)
                    break  # a provider that fails once will fail for the next tier too: do not wait again
                if not result.data["content"]:
                    continue
                label = str(result.data["id"])
                found.append(self._resource(slot, tier, key, label, f"{tier} memory of slot {slot.name!r}."))
        return found

    def _scope_enabled(self, start: TurnStart, slot: Slot) -> bool:
        return slot.name in start.scopes

    def _resource(self, slot: Slot, tier: str, key: str, label: str, what: str) -> Resource:
        path = f"{tier}/{quote(key, safe='')}" if key else tier
        description = f"{slot.description.strip()} {what}".strip()
        return Resource(
            uri=f"{URI_SCHEME}://{slot.name}/{path}", name=f"{slot.name}/{label}", title=label, description=description
        )

    def list_templates(self, caller: Caller) -> list[ResourceTemplate]:
        """``memvault://<slot>/daily/{date}`` and ``memvault://<slot>/peers/{slug}`` per memory slot."""
        templates: list[ResourceTemplate] = []
        for slot in self._visible(caller):
            if slot.kind != "memory":
                continue
            templates.append(
                ResourceTemplate(
                    uri_template=f"{URI_SCHEME}://{slot.name}/daily/{{date}}",
                    name=f"{slot.name}/daily",
                    description=f"The log of one day (YYYY-MM-DD) in slot {slot.name!r}.",
                )
            )
            templates.append(
                ResourceTemplate(
                    uri_template=f"{URI_SCHEME}://{slot.name}/peers/{{slug}}",
                    name=f"{slot.name}/peers",
                    description=f"What slot {slot.name!r} knows about one peer.",
                )
            )
        return templates

    def read_resource(self, caller: Caller, uri: str) -> str:
        """The text of one document, read through the slot's own ``read`` tool (scanner verdicts apply).

        :raises InvalidRequest: a URI that names no document of a slot the caller can see.
        :raises MemvaultError: the provider failed.
        """
        slot, tier, key = self._parse(uri)
        target = next((s for s in self._visible(caller) if s.name == slot), None)
        if target is None:
            raise InvalidRequest(f"no resource {uri!r}: the slot {slot!r} is not served to this caller", field="uri")
        if target.kind == "notes":
            if tier != "notes" or key:
                raise InvalidRequest(f"no resource {uri!r}: a notes slot has one document, {slot}/notes", field="uri")
            start = self._start(caller, target, fresh=True)
            if not self._scope_enabled(start, target):
                raise InvalidRequest(f"no resource {uri!r}: the slot has no scope for this caller", field="uri")
            return "\n".join(r.content for r in start.records) or "(no notes yet)"
        if tier not in _READ_TIERS:
            raise InvalidRequest(f"no resource {uri!r}: the tier must be one of {', '.join(_READ_TIERS)}", field="uri")
        if key and tier not in _KEYED_TIERS:
            raise InvalidRequest(f"no resource {uri!r}: only daily and peers take a key", field="uri")
        start = self._start(caller, target)
        result = start.tools.call(f"{slot}__read", {"tier": tier, "key": key})
        if not result.ok:
            if result.error == "UnknownTool":
                raise InvalidRequest(f"no resource {uri!r}: the slot has no scope for this caller", field="uri")
            raise _as_error(result)
        return str(result.data["content"])

    def _parse(self, uri: str) -> tuple[str, str, str]:
        prefix = f"{URI_SCHEME}://"
        if not uri.startswith(prefix):
            raise InvalidRequest(f"no resource {uri!r}: memvault resources are {prefix}<slot>/<tier>[/<key>]")
        parts = uri[len(prefix) :].split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise InvalidRequest(f"no resource {uri!r}: memvault resources are {prefix}<slot>/<tier>[/<key>]")
        return parts[0], parts[1], unquote(parts[2]) if len(parts) == 3 else ""

    def close(self, vaults: Sequence[memvault.Vault] = ()) -> None:
        with self._lock:
            self._cache.clear()
        for vault in vaults:
            vault.close()


def _as_error(result: ToolResult) -> MemvaultError:
    error_types: Mapping[str, type[MemvaultError]] = {
        "InvalidRequest": InvalidRequest,
        "NotSupported": memvault.NotSupported,
        "UpstreamTimeout": memvault.UpstreamTimeout,
    }
    cls = error_types.get(result.error, memvault.UpstreamError)
    return cls(result.content)
