"""A small agent graph around GraphMemory, driven by LangChain's scripted chat model (no network)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.graph import END, START, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from memvault_langgraph import GraphMemory, MemoryState


class ScriptedAgent:
    """recall -> agent <-> tools -> capture, with a model that answers from a script and records its input."""

    def __init__(self, memory: GraphMemory, replies: Iterable[AIMessage]) -> None:
        self.model = GenericFakeChatModel(messages=iter(list(replies)))
        self.inputs: list[list[BaseMessage]] = []
        graph = StateGraph(MemoryState)
        graph.add_node("recall", memory.recall)
        graph.add_node("agent", self._call_model)
        graph.add_node("tools", ToolNode(memory.tools()))
        graph.add_node("capture", memory.capture)
        graph.add_edge(START, "recall")
        graph.add_edge("recall", "agent")
        graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: "capture"})
        graph.add_edge("tools", "agent")
        graph.add_edge("capture", END)
        self.graph = graph.compile()

    def _call_model(self, state: MemoryState) -> dict[str, Any]:
        messages = GraphMemory.model_input(state)
        self.inputs.append(list(messages))
        return {"messages": [self.model.invoke(messages)]}

    def ask(self, text: str, *, thread: str, user: str | None) -> dict[str, Any]:
        configurable = {"thread_id": thread, **({"user_id": user} if user else {})}
        result: dict[str, Any] = self.graph.invoke({"messages": [("user", text)]}, {"configurable": configurable})
        return result


def call(name: str, args: dict[str, Any], call_id: str = "c1") -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}])
