"""The memory tools give each write an idempotency key of its own (P44) where the provider records them.

Every host that runs the tools (the MCP server, the OpenAI Agents and LangGraph adapters) builds them with
``memory_tools``: a write they repeat after a lost answer is then answered, not applied twice.
"""

from __future__ import annotations

from typing import Any

import pytest

import memvault
from memvault.contract.lifecycle import LifecycleContext, SlotOptions
from memvault.contract.models import Capability, RetainRequest
from memvault.default_lifecycle.tools import idempotency_key_for, memory_tools
from memvault.hooks.markers import hookimpl
from memvault.providers.memory import MemoryProvider


class _Keys:
    """A plugin that notes the idempotency key of every retain the vault's provider is asked for."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl(wrapper=True)
    def memvault_retain(self, request: RetainRequest) -> Any:
        self.seen.append(request.idempotency_key)
        return (yield)


def _ctx(vault: memvault.Vault, phase: str = "tools", operation_id: str = "op", **more: Any) -> LifecycleContext:
    return LifecycleContext(
        vault=vault,
        slot="m",
        description="",
        scope_key="a",
        workspace_id="w",
        agent_id="a",
        session_id="s",
        phase=phase,
        operation_id=operation_id,
        turn=1,
        **more,
    )


def _tools(vault: memvault.Vault) -> dict[str, Any]:
    return {tool.name: tool.handler for tool in memory_tools(_ctx(vault, options=SlotOptions()))}


def _vault(capabilities: frozenset[str], keys: _Keys) -> memvault.Vault:
    return memvault.Vault(MemoryProvider(), name="memory", capabilities=capabilities, plugins=[keys])


def test_each_tool_write_carries_a_key_of_its_own() -> None:
    keys = _Keys()
    with _vault(MemoryProvider.capabilities, keys) as vault:
        tools = _tools(vault)
        tools["append_daily"]({"entry": "fed the cat"})
        tools["append_daily"]({"entry": "fed the cat"})
        tools["write"]({"tier": "pins", "content": "likes tea\n", "mode": "append"})
        assert vault.read(memvault.ReadRequest(workspace_id="w", agent_id="a", tier="pins")).content == "likes tea\n"
    assert len(keys.seen) == 3
    assert all(key.startswith("mv-") for key in keys.seen)
    assert len(set(keys.seen)) == 3  # one per call: two calls with the same text are two writes


def test_no_key_for_a_provider_that_records_none() -> None:
    keys = _Keys()
    without = MemoryProvider.capabilities - {Capability.IDEMPOTENT_WRITES}
    with _vault(without, keys) as vault:
        _tools(vault)["append_daily"]({"entry": "fed the cat"})
    assert keys.seen == [""]


@pytest.mark.parametrize("base", ["", "memop1_abc:0"])
def test_idempotency_key_for_is_identifier_safe(base: str) -> None:
    with memvault.open("memory", scanner="off") as vault:
        key = idempotency_key_for(vault, base)
        assert key == base or key.startswith("mv-")
        # The rule RetainRequest applies (P3): the key is accepted as it is.
        assert RetainRequest(workspace_id="w", agent_id="a", tier="pins", content="x\n", mode="append",
                             idempotency_key=key).idempotency_key == key  # fmt: skip


class _KeysNotHonoured(MemoryProvider):
    """A provider like the http-remote client in front of a service whose provider records no keys: it
    declares the capability (its vault's capabilities are fixed) but answers ``honours_idempotency_keys()``
    False and refuses a key, as the client does (``NotSupported``)."""

    def honours_idempotency_keys(self) -> bool:
        return False

    @hookimpl
    def memvault_retain(self, request: RetainRequest) -> Any:
        if request.idempotency_key:
            raise memvault.errors.NotSupported("the service's provider records no idempotency keys")
        return super().memvault_retain(request)


def test_turn_capture_sends_no_key_a_service_cannot_honour() -> None:
    """The default turn capture asks the same question as the tools (``idempotency_key_for``): over a
    service whose provider records no keys it writes the turn unkeyed instead of failing with NotSupported."""
    keys = _Keys()
    with memvault.Vault(
        _KeysNotHonoured(), name="remote-ish", capabilities=MemoryProvider.capabilities, plugins=[keys]
    ) as vault:
        ctx = _ctx(
            vault,
            "turn.completed",
            "op-1",
            input_text="where do I park?",
            output_text="level 2",
            options=SlotOptions(capture=True),
        )
        vault.capture_turn_completed(ctx)
        body = vault.read(memvault.ReadRequest(workspace_id="w", agent_id="a", tier="daily")).content
    assert "level 2" in body
    assert keys.seen == [""]
