"""The adapter: memvault's lifecycle around an OpenAI Agents SDK run.

Why an input filter rather than dynamic instructions: memvault's contract
(L7) puts recalled records in the conversation as *user-role* messages,
attributed to their slot, never as system instructions: a record is text a
user or an agent once wrote, and must not gain an instruction's authority.
``RunConfig.call_model_input_filter`` is the SDK's hook for editing the model
input before each call, so the records go in front of the input items there,
on every model call of the run, without being written into the SDK's own
session history (the next turn recalls afresh).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from agents import Agent, FunctionTool, RunConfig, Runner, RunResult
from agents.items import TResponseInputItem
from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData
from agents.tool_context import ToolContext

from memvault import InvalidRequest
from memvault.lifecycle import Entry, Runtime, Session, TurnStart
from memvault.lifecycle.tools import ToolSet

__all__ = ["AgentMemory", "function_tools", "record_messages"]


def _tool_output(toolset: ToolSet, name: str, arguments: str) -> str:
    result = toolset.call(name, arguments or "{}")
    if result.ok:
        return result.content
    # The SDK sends a returned string back to the model; a raised exception would end the run.
    return f"error ({result.error}): {result.content}"


def function_tools(toolset: ToolSet) -> list[FunctionTool]:
    """One ``FunctionTool`` per memvault tool, with its name, description and JSON Schema.

    Calls run in a worker thread (the vaults are synchronous). A refused call
    (bad arguments, a cap, the scanner, a provider outage) returns
    ``error (<class>): <message>`` to the model instead of failing the run.
    """
    tools: list[FunctionTool] = []
    for spec in toolset.to_openai():
        function = spec["function"]
        name = function["name"]

        async def invoke(ctx: ToolContext[Any], arguments: str, _name: str = name) -> str:
            return await asyncio.to_thread(_tool_output, toolset, _name, arguments)

        tools.append(
            FunctionTool(
                name=name,
                description=function["description"],
                params_json_schema=function["parameters"],
                on_invoke_tool=invoke,
                # memvault schemas have optional arguments (strict mode would make every one required).
                strict_json_schema=False,
            )
        )
    return tools


def record_messages(records: Sequence[Entry]) -> list[TResponseInputItem]:
    """Recalled records as user-role input items, each marked with its slot."""
    items: list[TResponseInputItem] = []
    for record in records:
        label = f"[memory: {record.slot}]" if record.slot else "[memory]"
        items.append({"role": "user", "content": f"{label} {record.content}"})
    return items


class AgentMemory:
    """One conversation's memory for the Agents SDK (a memvault lifecycle :class:`~memvault.lifecycle.Session`).

    :param runtime: the slots (``memvault.lifecycle.Runtime``).
    :param session_id: the conversation.
    :param principal: who is talking; scopes ``by_principal`` slots (``None``: anonymous).
    """

    def __init__(self, runtime: Runtime, session_id: str, *, principal: str | None = None) -> None:
        self.session: Session = runtime.session(session_id, principal=principal)
        self.turn = 0
        self.start: TurnStart | None = None

    # -- the building blocks --------------------------------------------------

    async def start_turn(self, user_input: str) -> TurnStart:
        """Lock every slot's scope and recall for ``user_input`` (all-or-nothing, memvault L5-L7).

        :raises memvault.lifecycle.TurnFailed: a recall failed; do not call the model.
        """
        self.turn += 1
        self.start = await self.session.aturn_started(self.turn, user_input)
        return self.start

    def tools(self) -> list[FunctionTool]:
        """The started turn's tools as ``FunctionTool`` objects (bound to the locked scopes)."""
        return function_tools(self._started().tools)

    def input_filter(self, then: CallModelInputFilter | None = None) -> CallModelInputFilter:
        """A ``RunConfig.call_model_input_filter`` that puts the turn's recalled records before the input.

        The records of the latest recall per id (memvault L7) come first, as
        user-role messages; ``then`` (your own filter) runs on the result.
        """

        async def apply(data: CallModelData[Any]) -> ModelInputData:
            records = self._records()
            model_data = ModelInputData(
                input=[*record_messages(records), *data.model_data.input], instructions=data.model_data.instructions
            )
            if then is None:
                return model_data
            outcome = then(CallModelData(model_data=model_data, agent=data.agent, context=data.context))
            if asyncio.iscoroutine(outcome) or isinstance(outcome, asyncio.Future):
                awaited: ModelInputData = await outcome
                return awaited
            return outcome  # type: ignore[return-value]

        return apply

    async def complete_turn(self, output: object) -> None:
        """Capture the turn (memvault L10): a capture that fails is logged, the turn stands."""
        text = output if isinstance(output, str) else json.dumps(output, default=str, ensure_ascii=False)
        await self.session.aturn_completed(self.turn, text)

    # -- the whole turn ---------------------------------------------------------

    async def run(
        self, agent: Agent[Any], user_input: str, *, run_config: RunConfig | None = None, **kwargs: Any
    ) -> RunResult:
        """One turn: recall, ``Runner.run`` with the memory tools and records, capture.

        The agent is cloned with its own tools plus the slots' tools; other
        keyword arguments go to ``Runner.run``.
        """
        await self.start_turn(user_input)
        own_tools = [t for t in agent.tools if not self._is_memory_tool(t)]
        with_memory = agent.clone(tools=[*own_tools, *self.tools()])
        config = run_config or RunConfig()
        config = _replace_filter(config, self.input_filter(config.call_model_input_filter))
        result = await Runner.run(with_memory, user_input, run_config=config, **kwargs)
        await self.complete_turn(result.final_output)
        return result

    def _started(self) -> TurnStart:
        if self.start is None:
            raise InvalidRequest("no turn started: call start_turn(user_input) (or run) first", field="turn")
        return self.start

    def _records(self) -> list[Entry]:
        return [e for e in self.session.projected() if e.kind == "record"]

    def _is_memory_tool(self, tool: object) -> bool:
        slots = {s.name for s in self.session.runtime.slots}
        name = getattr(tool, "name", "")
        return isinstance(name, str) and name.split("__", 1)[0] in slots and "__" in name


def _replace_filter(config: RunConfig, new: CallModelInputFilter) -> RunConfig:
    import dataclasses

    return dataclasses.replace(config, call_model_input_filter=new)
