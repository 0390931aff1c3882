"""Model-facing tools over the `memory` provider: names, schemas, binding, dispatch, export (L12-L13)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

import memvault
from memvault.contract.lifecycle import Tool
from memvault.lifecycle import Runtime, Slot, TurnStart, by_principal, scope_key
from memvault.lifecycle.tools import ToolSet, bind_slot_tools, to_anthropic, to_mcp, to_openai, validate_tool_name

MEMORY_TOOLS = ["read", "write", "search", "append_daily"]


@pytest.fixture
def vault() -> Iterator[memvault.Vault]:
    with memvault.open("memory") as v:
        yield v


def start_for(vault: memvault.Vault, principal: str = "alice", name: str = "profile") -> TurnStart:
    runtime = Runtime(
        [Slot(name=name, description="Facts about the user.", vault=vault, scope=by_principal)], workspace_id="w"
    )
    return runtime.session(f"s-{principal}", principal=principal).turn_started(1, "")


# -- L12 names, descriptions, binding -------------------------------------------------------


def test_L12_each_slot_tool_is_exposed_as_slot__name(vault: memvault.Vault) -> None:
    assert start_for(vault).tools.names == [f"profile__{n}" for n in MEMORY_TOOLS]


@pytest.mark.parametrize("name", ["a", "a__read", "Ab-9_x", "x" * 64])
def test_L12_valid_tool_names(name: str) -> None:
    assert validate_tool_name(name) == name


@pytest.mark.parametrize("name", ["", "1a", "_a", "-a", "a b", "a.b", "a/b", "é", "x" * 65, 7])
def test_L12_the_core_rejects_other_tool_names_naming_the_rule(name: object) -> None:
    with pytest.raises(memvault.InvalidRequest, match=r"L12"):
        validate_tool_name(name)


def test_L12_a_slot_whose_tool_names_would_pass_64_characters_gets_no_tools(vault: memvault.Vault) -> None:
    start = start_for(vault, name="s" * 55)  # "s"*55 + "__append_daily" is 69 characters
    assert len(start.tools) == 0


def test_L12_the_slot_description_is_prepended_to_the_tool_description(vault: memvault.Vault) -> None:
    tool = start_for(vault).tools.get("profile__search")
    assert tool is not None
    assert tool.description.startswith("Facts about the user.\n\n")
    assert tool.description.endswith("Search memory; returns matching lines, best first.")


def test_L12_a_tool_is_bound_to_its_locked_scope(vault: memvault.Vault) -> None:
    alice = start_for(vault, "alice")
    bob = start_for(vault, "bob")
    assert alice.tools.call("profile__write", {"tier": "AGENT", "content": "alice likes tea\n", "mode": "append"}).ok
    found = bob.tools.call("profile__search", {"q": "tea"})
    assert found.ok
    assert found.data["hits"] == []
    assert bob.tools.call("profile__read", {"tier": "AGENT"}).data["content"] == ""
    assert alice.tools.call("profile__read", {"tier": "AGENT"}).data["content"] == "alice likes tea\n"


@pytest.mark.parametrize(
    "extra",
    [
        {"agent_id": "someone-else"},
        {"workspace_id": "other"},
        {"scope": "bob"},
        {"scope_key": "memscope1_x"},
        {"crew_id": "c"},
    ],
)
def test_L12_no_argument_can_redirect_a_tool_to_another_scope(vault: memvault.Vault, extra: dict[str, str]) -> None:
    tools = start_for(vault, "alice").tools
    result = tools.call("profile__write", {"tier": "AGENT", "content": "x", "mode": "append", **extra})
    assert not result.ok
    assert result.error == "InvalidRequest"
    assert "unknown argument" in result.content
    bob_key = scope_key("profile", None, "bob")
    assert vault.read(memvault.ReadRequest(workspace_id="w", agent_id=bob_key, tier="AGENT")).content == ""


def test_L12_bind_slot_tools_rejects_a_schema_without_additional_properties_false() -> None:
    loose = Tool(name="t", description="d", input_schema={"type": "object"}, handler=dict)
    with pytest.raises(memvault.InvalidRequest, match="additionalProperties"):
        bind_slot_tools("s", "", [loose])


# -- L13 the memory tools ----------------------------------------------------------------------


def test_L13_every_schema_is_an_object_with_additional_properties_false(vault: memvault.Vault) -> None:
    for tool in start_for(vault).tools.tools:
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False


def test_L13_tool_arguments_match_the_contract(vault: memvault.Vault) -> None:
    tools = start_for(vault).tools

    def props(name: str) -> tuple[set[str], set[str]]:
        tool = tools.get(f"profile__{name}")
        assert tool is not None
        return set(tool.input_schema["properties"]), set(tool.input_schema["required"])

    assert props("read") == ({"tier", "key"}, {"tier"})
    assert props("write") == ({"tier", "key", "content", "mode"}, {"tier", "content", "mode"})
    assert props("search") == ({"q", "tier", "limit"}, {"q"})
    assert props("append_daily") == ({"entry"}, {"entry"})


def test_L13_write_cannot_target_lessons(vault: memvault.Vault) -> None:
    tools = start_for(vault).tools
    write = tools.get("profile__write")
    assert write is not None
    assert "lessons" not in write.input_schema["properties"]["tier"]["enum"]
    result = tools.call("profile__write", {"tier": "lessons", "content": "x", "mode": "append"})
    assert (result.ok, result.error) == (False, "InvalidRequest")


@pytest.mark.parametrize("limit", [0, 21, -1, "5", 2.5, True])
def test_L13_search_limit_must_be_an_integer_from_1_to_20(vault: memvault.Vault, limit: object) -> None:
    result = start_for(vault).tools.call("profile__search", {"q": "x", "limit": limit})
    assert (result.ok, result.error) == (False, "InvalidRequest")
    assert "limit" in result.content


@pytest.mark.parametrize("limit", [1, 20])
def test_L13_search_limit_bounds_are_accepted(vault: memvault.Vault, limit: int) -> None:
    assert start_for(vault).tools.call("profile__search", {"q": "x", "limit": limit}).ok


def test_L13_read_write_search_round_trip(vault: memvault.Vault) -> None:
    tools = start_for(vault).tools
    wrote = tools.call(
        "profile__write", {"tier": "peers", "key": "bob", "content": "Bob is the CTO.\n", "mode": "replace"}
    )
    assert wrote.data == {"id": "peers/bob.md", "bytes": 16, "warning": ""}
    read = tools.call("profile__read", {"tier": "peers", "key": "bob"})
    assert read.data["content"] == "Bob is the CTO.\n"
    found = tools.call("profile__search", {"q": "who is the CTO", "tier": "peers", "limit": 3})
    assert [(h["source"], h["line"]) for h in found.data["hits"]] == [("peers/bob.md", 1)]
    assert json.loads(found.content) == found.data


def test_L13_append_daily_appends_a_timestamped_line_to_today(vault: memvault.Vault) -> None:
    tools = start_for(vault).tools
    assert tools.call("profile__append_daily", {"entry": "Shipped the release."}).ok
    assert tools.call("profile__append_daily", {"entry": "Wrote\nthe notes."}).ok
    today = memvault.contract.models.today_utc()
    body = tools.call("profile__read", {"tier": "daily", "key": today}).data["content"]
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
    assert re.fullmatch(rf"- {stamp} \u2014 Shipped the release\.\n- {stamp} \u2014 Wrote the notes\.\n", body)
    assert body[2:12] == today


def test_L13_an_unknown_tool_is_an_error_result_not_an_exception(vault: memvault.Vault) -> None:
    result = start_for(vault).tools.call("profile__delete_everything", {})
    assert (result.ok, result.error) == (False, "UnknownTool")
    assert "profile__search" in result.content


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"tier": "AGENT"},
        {"tier": "AGENT", "content": "x", "mode": "merge"},
        {"tier": "NOPE", "content": "x", "mode": "append"},
        {"tier": "AGENT", "content": "", "mode": "append"},
        {"tier": "AGENT", "content": 5, "mode": "append"},
        ["tier", "AGENT"],
        "{not json",
        '{"tier": "AGENT"}',
        '{"a": ' * 5000 + "1" + "}" * 5000,  # nested past the parser's recursion limit: it crashed the run
    ],
)
def test_L13_bad_arguments_are_an_error_result_naming_the_problem(vault: memvault.Vault, arguments: Any) -> None:
    result = start_for(vault).tools.call("profile__write", arguments)
    assert (result.ok, result.error) == (False, "InvalidRequest")
    assert result.content


def test_L13_arguments_may_arrive_as_a_json_string(vault: memvault.Vault) -> None:
    result = start_for(vault).tools.call("profile__write", '{"tier": "AGENT", "content": "x", "mode": "append"}')
    assert result.ok


def test_L13_a_provider_error_is_an_error_result(vault: memvault.Vault) -> None:
    result = start_for(vault).tools.call(
        "profile__write", {"tier": "PERSONA", "content": "x" * 1501, "mode": "replace"}
    )
    assert (result.ok, result.error) == (False, "CapExceeded")
    assert "1500" in result.content


def test_L13_a_bad_daily_key_is_an_error_result(vault: memvault.Vault) -> None:
    result = start_for(vault).tools.call("profile__read", {"tier": "daily", "key": "../etc"})
    assert (result.ok, result.error) == (False, "InvalidRequest")


def test_L13_a_handler_that_raises_anything_is_an_error_result() -> None:
    def boom(args: Any) -> Any:
        raise ZeroDivisionError("oops")

    tools = ToolSet(
        bind_slot_tools(
            "s",
            "",
            [
                Tool(
                    name="t",
                    description="d",
                    input_schema={"type": "object", "additionalProperties": False},
                    handler=boom,
                )
            ],
        )
    )
    result = tools.call("s__t", {})
    assert (result.ok, result.error) == (False, "ToolError")


# -- exporters ----------------------------------------------------------------------------------


def test_exporters_give_the_openai_anthropic_and_mcp_shapes(vault: memvault.Vault) -> None:
    tools = start_for(vault).tools
    tool = tools.tools[0]
    assert to_openai([tool]) == [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": dict(tool.input_schema)},
        }
    ]
    assert to_anthropic([tool]) == [
        {"name": tool.name, "description": tool.description, "input_schema": dict(tool.input_schema)}
    ]
    assert to_mcp([tool]) == [
        {"name": tool.name, "description": tool.description, "inputSchema": dict(tool.input_schema)}
    ]
    assert tools.to_openai() == to_openai(tools.tools)
    json.dumps([tools.to_openai(), tools.to_anthropic(), tools.to_mcp()])  # JSON-serialisable


def test_exported_schemas_are_copies(vault: memvault.Vault) -> None:
    tools = start_for(vault).tools
    exported = tools.to_mcp()
    exported[0]["inputSchema"]["properties"].clear()
    assert tools.tools[0].input_schema["properties"]
