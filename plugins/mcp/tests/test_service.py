"""The server in process (the SDK's in-memory client): the behaviour that does not need a subprocess."""

from __future__ import annotations

import json
from typing import Any

from mcp import Client, MCPError
from mcp_support import run, text_of

import memvault
from memvault.lifecycle import Slot, by_principal
from memvault_mcp import Caller, MemoryService, build_server


def _service() -> MemoryService:
    vault = memvault.open("memory")
    return MemoryService([Slot(name="m", description="Memory.", vault=vault, scope=by_principal)], workspace_id="w")


def _as(principal: str | None) -> Any:
    caller = Caller(principal=principal, session_id="s1")
    return lambda ctx: caller


def test_an_anonymous_caller_gets_no_by_principal_tools() -> None:
    server = build_server(_service(), _as(None))

    async def session() -> list[str]:
        async with Client(server) as client:
            return [t.name for t in (await client.list_tools()).tools]

    assert run(session) == []


def test_a_handler_that_raises_becomes_a_tool_error_not_a_crash() -> None:
    service = _service()

    def broken(ctx: Any) -> Caller:
        raise RuntimeError("principal lookup exploded")

    server = build_server(service, broken)

    async def session() -> tuple[bool, str, bool]:
        async with Client(server) as client:
            failed = await client.call_tool("m__read", {"tier": "AGENT"})
            good = build_server(service, _as("a"))
            async with Client(good) as other:
                ok = await other.call_tool("m__read", {"tier": "AGENT"})
            return failed.is_error, text_of(failed), ok.is_error

    is_error, message, later = run(session)
    assert is_error
    assert "principal lookup exploded" in message
    assert not later


def test_structured_content_carries_the_tool_data() -> None:
    server = build_server(_service(), _as("a"))

    async def session() -> tuple[str, Any]:
        async with Client(server) as client:
            result = await client.call_tool("m__write", {"tier": "AGENT", "content": "x\n", "mode": "append"})
            return text_of(result), result.structured_content

    text, structured = run(session)
    assert json.loads(text) == structured == {"id": "AGENT.md", "bytes": 2, "warning": ""}


def test_an_anonymous_caller_lists_no_documents_and_reads_none() -> None:
    service = _service()
    anonymous = Caller(principal=None, session_id="s1")
    assert service.list_resources(anonymous) == []
    server = build_server(service, _as(None))

    async def session() -> str:
        async with Client(server) as client:
            try:
                await client.read_resource("memvault://m/AGENT")
            except MCPError as exc:  # the JSON-RPC error, raised by the SDK's client
                return str(exc.message)
            return "read"

    assert "no scope for this caller" in run(session)


def test_a_by_session_slot_keeps_sessions_apart_and_a_by_principal_slot_spans_them() -> None:
    from memvault.lifecycle import by_session

    vault = memvault.open("memory")
    service = MemoryService(
        [
            Slot(name="m", description="", vault=vault, scope=by_principal),
            Slot(name="s", description="", vault=vault, scope=by_session),
        ]
    )
    write = {"tier": "AGENT", "content": "kept\n", "mode": "append"}
    first, second = Caller(principal="a", session_id="s1"), Caller(principal="a", session_id="s2")
    assert service.call_tool(first, "m__write", write).ok
    assert service.call_tool(first, "s__write", write).ok
    assert json.loads(service.call_tool(second, "m__read", {"tier": "AGENT"}).content)["content"] == "kept\n"
    assert json.loads(service.call_tool(second, "s__read", {"tier": "AGENT"}).content)["content"] == ""
