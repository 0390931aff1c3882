"""Layer 6: model-facing tools of a turn: naming, argument checks, dispatch and exporters (contract L12-L13).

Every slot exposes its tools as ``<slot>__<name>``; the runtime builds them at
turn start, bound to the slot's locked scope (the handler closes over the
partition; no argument names a workspace, agent or scope). A :class:`ToolSet`
dispatches a model's call and always returns a :class:`ToolResult`: an unknown
tool, bad arguments or a provider error become an error result, never an
exception in the agent loop.

Export the same tools for any model API::

    start = session.turn_started(1, "hello")
    start.tools.to_openai()     # [{"type": "function", "function": {...}}]
    start.tools.to_anthropic()  # [{"name", "description", "input_schema"}]
    start.tools.to_mcp()        # [{"name", "description", "inputSchema"}]
    start.tools.call("profile__search", {"q": "units"})

The memory tools themselves come from the default lifecycle
(:mod:`memvault.default_lifecycle.tools`) or a provider's own ``memvault_tools``.

May import: :mod:`memvault.contract`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from attrs import field, frozen

from memvault.contract.errors import InvalidRequest, MemvaultError
from memvault.contract.lifecycle import Tool

__all__ = [
    "ToolResult",
    "ToolSet",
    "bind_slot_tools",
    "to_anthropic",
    "to_mcp",
    "to_openai",
    "validate_arguments",
    "validate_tool_name",
]

log = logging.getLogger("memvault.lifecycle.tools")

_TOOL_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


@frozen(kw_only=True)
class ToolResult:
    """The outcome of one tool call: ``ok``, text for the model, and structured ``data``.

    On error ``ok`` is false and ``error`` names the error class
    (``InvalidRequest``, ``CapExceeded``, ``UnknownTool`` ...).
    """

    ok: bool
    content: str
    data: Any = None
    error: str = ""


def validate_tool_name(name: object) -> str:
    """Check a model-facing tool name (L12): a letter, then ``[A-Za-z0-9_-]``, at most 64 characters.

    :raises InvalidRequest: naming the rule.
    """
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
        raise InvalidRequest(
            f"tool name {str(name)[:100]!r} is invalid (L12): start with a letter, use only "
            "A-Z a-z 0-9 _ -, at most 64 characters",
            field="name",
        )
    return name


def _check_schema(name: str, schema: object) -> None:
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise InvalidRequest(f"tool {name!r} input schema must be a JSON Schema object (L13)", field="input_schema")
    if schema.get("additionalProperties") is not False:
        raise InvalidRequest(
            f"tool {name!r} input schema must set additionalProperties: false (L13)", field="input_schema"
        )


def bind_slot_tools(slot: str, description: str, tools: object) -> list[Tool]:
    """Prefix a hook's tools with ``<slot>__`` and the slot description (L12), checking each.

    :raises InvalidRequest: the hook returned something other than a list of
        :class:`Tool`, a bad name, a duplicate, or a schema without
        ``additionalProperties: false``. The runtime logs it and omits the
        slot's tools for the turn (L10).
    """
    if tools is None:
        return []
    if not isinstance(tools, (list, tuple)):
        raise InvalidRequest(f"slot {slot!r} tools hook returned {type(tools).__name__}, not a list of Tool")
    out: list[Tool] = []
    names: set[str] = set()
    for tool in tools:
        if not isinstance(tool, Tool):
            raise InvalidRequest(f"slot {slot!r} tools hook returned a {type(tool).__name__}, not a memvault Tool")
        full = validate_tool_name(f"{slot}__{tool.name}")
        if full in names:
            raise InvalidRequest(f"slot {slot!r} returned two tools named {tool.name!r}", field="name")
        names.add(full)
        _check_schema(full, tool.input_schema)
        text = f"{description.strip()}\n\n{tool.description}" if description.strip() else tool.description
        out.append(Tool(name=full, description=text, input_schema=tool.input_schema, handler=tool.handler))
    return out


# -- argument validation (the JSON Schema subset the tools use) ---------------

_JSON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def validate_arguments(schema: Mapping[str, Any], arguments: object, *, tool: str = "") -> dict[str, Any]:
    """Check ``arguments`` against a tool's schema (object, properties, required,
    ``additionalProperties: false``, type, enum, minimum/maximum, minLength/maxLength).

    :return: the arguments as a new dict.
    :raises InvalidRequest: naming the argument and the rule it breaks.
    """
    where = f"tool {tool!r}: " if tool else ""
    if not isinstance(arguments, Mapping):
        raise InvalidRequest(f"{where}arguments must be a JSON object, got {type(arguments).__name__}")
    props: Mapping[str, Any] = schema.get("properties", {})
    for key in arguments:
        if key not in props and schema.get("additionalProperties") is False:
            allowed = ", ".join(sorted(props)) or "none"
            raise InvalidRequest(f"{where}unknown argument {key!r}: allowed arguments are {allowed}", field=str(key))
    for key in schema.get("required", ()):
        if key not in arguments:
            raise InvalidRequest(f"{where}argument {key!r} is required", field=key)
    checked: dict[str, Any] = dict(arguments)
    for key, value in checked.items():
        spec = props[key]
        kind = spec.get("type")
        ok_types = _JSON_TYPES.get(kind, (object,))
        if not isinstance(value, ok_types) or (kind in ("integer", "number") and isinstance(value, bool)):
            raise InvalidRequest(f"{where}argument {key!r} must be of type {kind}", field=key)
        if "enum" in spec and value not in spec["enum"]:
            raise InvalidRequest(f"{where}argument {key!r} must be one of {spec['enum']}, got {value!r}", field=key)
        if "minimum" in spec and value < spec["minimum"]:
            raise InvalidRequest(f"{where}argument {key!r} must be at least {spec['minimum']}", field=key)
        if "maximum" in spec and value > spec["maximum"]:
            raise InvalidRequest(f"{where}argument {key!r} must be at most {spec['maximum']}", field=key)
        length = len(value) if isinstance(value, (str, list, dict)) else 0
        if "minLength" in spec and length < spec["minLength"]:
            raise InvalidRequest(
                f"{where}argument {key!r} must have at least {spec['minLength']} characters", field=key
            )
        if "maxLength" in spec and length > spec["maxLength"]:
            raise InvalidRequest(f"{where}argument {key!r} must have at most {spec['maxLength']} characters", field=key)
    return checked


# -- the tool set: dispatch and export ----------------------------------------


def _tools_tuple(value: Iterable[Tool]) -> tuple[Tool, ...]:
    return tuple(value)


@frozen
class ToolSet:
    """The tools of one turn, by full name, with a dispatcher and exporters."""

    tools: tuple[Tool, ...] = field(converter=_tools_tuple)

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tools]

    def get(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def __len__(self) -> int:
        return len(self.tools)

    def call(self, name: str, arguments: object = None) -> ToolResult:
        """Run one tool call from the model; never raises into the agent loop (L13).

        ``arguments`` may be a mapping or a JSON string (as OpenAI sends them).
        """
        tool = self.get(name) if isinstance(name, str) else None
        if tool is None:
            known = ", ".join(self.names) or "none this turn"
            return ToolResult(ok=False, content=f"unknown tool {name!r}; available tools: {known}", error="UnknownTool")
        if arguments is None:
            arguments = {}
        if isinstance(arguments, (str, bytes)):
            try:
                arguments = json.loads(arguments)
            except ValueError as exc:
                return ToolResult(
                    ok=False, content=f"tool {name!r}: arguments are not valid JSON: {exc}", error="InvalidRequest"
                )
            except RecursionError:  # nested deeper than the parser goes: a refusal, not a crash of the run
                return ToolResult(
                    ok=False,
                    content=f"tool {name!r}: arguments are nested too deeply to read: send a flat JSON object",
                    error="InvalidRequest",
                )
        try:
            args = validate_arguments(tool.input_schema, arguments, tool=name)
            data = tool.handler(args)
        except MemvaultError as exc:
            return ToolResult(ok=False, content=str(exc), error=type(exc).__name__)
        except Exception as exc:  # noqa: BLE001 - a tool must not break the agent loop
            log.warning("tool %s raised %s: %s", name, type(exc).__name__, exc)
            return ToolResult(ok=False, content=f"tool {name!r} failed: {type(exc).__name__}: {exc}", error="ToolError")
        return ToolResult(ok=True, content=json.dumps(data, ensure_ascii=False), data=data)

    def to_openai(self) -> list[dict[str, Any]]:
        return to_openai(self.tools)

    def to_anthropic(self) -> list[dict[str, Any]]:
        return to_anthropic(self.tools)

    def to_mcp(self) -> list[dict[str, Any]]:
        return to_mcp(self.tools)


def _schema(tool: Tool) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(tool.input_schema))  # a deep, JSON-clean copy
    return copy


def to_openai(tools: Iterable[Tool]) -> list[dict[str, Any]]:
    """OpenAI Chat Completions ``tools``: ``{"type": "function", "function": {name, description, parameters}}``."""
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": _schema(t)}}
        for t in tools
    ]


def to_anthropic(tools: Iterable[Tool]) -> list[dict[str, Any]]:
    """Anthropic Messages ``tools``: ``{name, description, input_schema}``."""
    return [{"name": t.name, "description": t.description, "input_schema": _schema(t)} for t in tools]


def to_mcp(tools: Iterable[Tool]) -> list[dict[str, Any]]:
    """MCP ``tools/list`` entries: ``{name, description, inputSchema}``."""
    return [{"name": t.name, "description": t.description, "inputSchema": _schema(t)} for t in tools]
