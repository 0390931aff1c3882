"""`memvault mcp` over stdio, driven by the official SDK's client in a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path

from mcp import Client
from mcp_support import INJECTION, run, stdio_params, text_of

WRITE = {"tier": "AGENT", "content": "Prefers metric units.\n", "mode": "append"}


def test_stdio_lists_every_slots_tools_with_their_schemas(setup: Path) -> None:
    async def session() -> dict[str, object]:
        async with Client(stdio_params(setup)) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    tools = run(session)
    assert sorted(tools) == sorted(
        [
            f"{slot}__{tool}"
            for slot in ("profile", "team", "scratch", "remote")
            for tool in ("read", "write", "search", "append_daily")
        ]
        + ["notes__save", "notes__remove"]
    )
    write = tools["profile__write"]
    assert write.description.startswith("Facts about the user.")
    assert write.input_schema["additionalProperties"] is False
    assert set(write.input_schema["required"]) == {"tier", "content", "mode"}


def test_stdio_write_search_read_round_trip(setup: Path) -> None:
    async def session() -> list[str]:
        async with Client(stdio_params(setup)) as client:
            wrote = await client.call_tool("profile__write", WRITE)
            found = await client.call_tool("profile__search", {"q": "which units"})
            read = await client.call_tool("profile__read", {"tier": "AGENT"})
            assert not (wrote.is_error)
            assert not (found.is_error)
            assert not (read.is_error)
            return [text_of(wrote), text_of(found), text_of(read)]

    wrote, found, read = (json.loads(text) for text in run(session))
    assert wrote["id"] == "AGENT.md"
    assert found["hits"][0]["snippet"] == "Prefers metric units."
    assert read["content"] == "Prefers metric units.\n"


def test_stdio_scanner_refusal_is_a_tool_error_and_nothing_is_stored(setup: Path) -> None:
    async def session() -> tuple[bool, str, str]:
        async with Client(stdio_params(setup)) as client:
            refused = await client.call_tool("profile__write", {"tier": "pins", "content": INJECTION, "mode": "append"})
            after = await client.call_tool("profile__read", {"tier": "pins"})
            return refused.is_error, text_of(refused), text_of(after)

    is_error, message, after = run(session)
    assert is_error
    assert message.startswith("ContentRejected: ")
    assert "instruction_override" in message
    assert json.loads(after)["content"] == ""


def test_stdio_cap_refusal_is_a_tool_error(setup: Path) -> None:
    async def session() -> tuple[bool, str]:
        async with Client(stdio_params(setup)) as client:
            refused = await client.call_tool(
                "profile__write", {"tier": "PERSONA", "content": "x" * 1600, "mode": "replace"}
            )
            return refused.is_error, text_of(refused)

    is_error, message = run(session)
    assert is_error
    assert message.startswith("CapExceeded: ")


def test_stdio_provider_outage_is_a_tool_error_and_the_server_stays_up(setup: Path) -> None:
    async def session() -> tuple[bool, str, bool]:
        async with Client(stdio_params(setup)) as client:
            down = await client.call_tool("remote__search", {"q": "anything"})
            still = await client.call_tool("profile__write", WRITE)
            return down.is_error, text_of(down), still.is_error

    is_error, message, later_failed = run(session)
    assert is_error
    assert message.startswith(("UpstreamError: ", "UpstreamTimeout: "))
    assert not later_failed


def test_stdio_bad_arguments_and_unknown_tools_are_tool_errors(setup: Path) -> None:
    async def session() -> list[tuple[bool, str]]:
        async with Client(stdio_params(setup)) as client:
            calls = [
                await client.call_tool("profile__write", {**WRITE, "agent_id": "eve"}),
                await client.call_tool("profile__search", {"q": "x", "limit": 50}),
                await client.call_tool("profile__drop_everything", {}),
            ]
            return [(c.is_error, text_of(c)) for c in calls]

    (named, limit, unknown) = run(session)
    assert named[0]
    assert "unknown argument 'agent_id'" in named[1]
    assert limit[0]
    assert "at most 20" in limit[1]
    assert unknown[0]
    assert unknown[1].startswith("UnknownTool: ")


def test_stdio_principals_never_see_each_others_memory(setup: Path) -> None:
    async def as_dana() -> None:
        async with Client(stdio_params(setup)) as client:
            assert not (await client.call_tool("profile__write", WRITE)).is_error
            assert not (await client.call_tool("team__write", {**WRITE, "content": "Office opens at nine.\n"})).is_error

    async def as_eve() -> tuple[str, str, str]:
        async with Client(stdio_params(setup, "--principal", "eve")) as client:
            found = await client.call_tool("profile__search", {"q": "units"})
            read = await client.call_tool("profile__read", {"tier": "AGENT"})
            shared = await client.call_tool("team__search", {"q": "office"})
            return text_of(found), text_of(read), text_of(shared)

    run(as_dana)
    found, read, shared = run(as_eve)
    assert json.loads(found)["hits"] == []
    assert json.loads(read)["content"] == ""
    assert json.loads(shared)["hits"][0]["snippet"] == "Office opens at nine."  # scope = "value": shared on purpose


def test_stdio_documents_are_listed_and_read_as_resources(setup: Path) -> None:
    async def session() -> tuple[list[str], str, str, list[str]]:
        async with Client(stdio_params(setup)) as client:
            await client.call_tool("profile__write", WRITE)
            await client.call_tool("notes__save", {"entry": "Report due Friday."})
            listed = [str(r.uri) for r in (await client.list_resources()).resources]
            agent = (await client.read_resource("memvault://profile/AGENT")).contents[0]
            notes = (await client.read_resource("memvault://notes/notes")).contents[0]
            templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
            return listed, getattr(agent, "text", ""), getattr(notes, "text", ""), templates

    listed, agent, notes, templates = run(session)
    assert "memvault://profile/AGENT" in listed
    assert "memvault://notes/notes" in listed
    assert agent == "Prefers metric units.\n"
    assert "Report due Friday." in notes
    assert "memvault://profile/daily/{date}" in templates


def test_stdio_a_quarantined_document_is_never_shown(setup: Path) -> None:
    """Text that reached the store behind the scanner's back (a hand edit) is blocked on the way out too."""
    import memvault
    from memvault.lifecycle import scope_key

    with memvault.open("sqlite", path=str(setup.parent / "memory.db"), scanner="off") as raw:
        raw.retain(
            memvault.RetainRequest(
                workspace_id="acme",
                agent_id=scope_key("profile", None, "dana"),
                tier="pins",
                content=INJECTION + "\n",
                mode="append",
            )
        )

    async def session() -> tuple[str, str]:
        async with Client(stdio_params(setup)) as client:
            read = await client.call_tool("profile__read", {"tier": "pins"})
            resource = (await client.read_resource("memvault://profile/pins")).contents[0]
            return text_of(read), getattr(resource, "text", "")

    read, resource = run(session)
    assert json.loads(read)["quarantined"] is True
    assert "Ignore all previous" not in read
    assert "Ignore all previous" not in resource


def test_stdio_a_handshake_era_client_is_served_too(setup: Path) -> None:
    """Desktop clients still speak the initialize handshake (protocol 2025-06-18 and before)."""

    async def session() -> tuple[list[str], bool]:
        async with Client(stdio_params(setup), mode="legacy") as client:
            names = [t.name for t in (await client.list_tools()).tools]
            wrote = await client.call_tool("profile__write", WRITE)
            return names, wrote.is_error

    names, failed = run(session)
    assert "profile__write" in names
    assert not failed
