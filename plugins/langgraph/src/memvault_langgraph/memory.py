"""The adapter: memvault's lifecycle as LangGraph nodes, its tools as LangChain tools.

Why there is no ``BaseStore`` adapter: see docs/agent-builders/langgraph.md
("Why not a BaseStore"). In short, LangGraph's store is a key-value store of
JSON objects under free-form namespaces, listed and searched by namespace
prefix, filtered on value fields, with timestamps and TTLs; memvault's
partitions hold a closed set of capped text documents, cannot be listed, and
are searched one partition at a time. A mapping would have to refuse or fake
most of that contract.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from langgraph.graph import MessagesState
from pydantic import ConfigDict, Field

from memvault import InvalidRequest, after_fork_in_child
from memvault.lifecycle import Entry, Runtime, Session, TurnStart
from memvault.lifecycle.tools import ToolSet

__all__ = ["GraphMemory", "MemoryState", "MemvaultTool"]

#: The principal of a run whose config names none (a probe: the tool list is built from it).
_SCHEMA_PROBE = "memvault-tool-schemas"


def _replace(old: list[AnyMessage], new: list[AnyMessage]) -> list[AnyMessage]:
    return new


class MemoryState(MessagesState):
    """``MessagesState`` plus ``memory``: the turn's recalled records (replaced at each turn start)."""

    memory: Annotated[list[AnyMessage], _replace]


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(part if isinstance(part, str) else str(part.get("text", "")) for part in content)


class MemvaultTool(BaseTool):
    """One slot tool as a LangChain tool, bound at call time to the run's conversation and principal.

    A refused call raises :class:`~langchain_core.tools.ToolException`, which
    LangChain turns into a ``ToolMessage`` with ``status="error"`` and the
    message (``handle_tool_error``): the model sees it, the graph goes on.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Any = Field(exclude=True)
    handle_tool_error: bool = True

    def _run(self, config: RunnableConfig, **arguments: Any) -> str:
        toolset = self.memory.toolset(config)
        result = toolset.call(self.name, arguments)
        if not result.ok:
            raise ToolException(f"{result.error}: {result.content}")
        return str(result.content)


class GraphMemory:
    """memvault slots for a LangGraph graph: tools, a recall node and a capture node.

    :param runtime: the slots (``memvault.lifecycle.Runtime``).
    :param thread_key: the ``config["configurable"]`` key naming the conversation.
    :param principal_key: the ``config["configurable"]`` key naming who is talking.
    """

    def __init__(self, runtime: Runtime, *, thread_key: str = "thread_id", principal_key: str = "user_id") -> None:
        self.runtime = runtime
        self.thread_key = thread_key
        self.principal_key = principal_key
        self._sessions: dict[tuple[str, str | None], tuple[Session, list[int]]] = {}
        self._lock = threading.Lock()
        after_fork_in_child(self, GraphMemory._forked)

    def _forked(self) -> None:
        self._lock = threading.Lock()  # in a forked child (contract P35): not one a lost thread holds

    # -- conversations ---------------------------------------------------------

    def _ids(self, config: RunnableConfig | None) -> tuple[str, str | None]:
        configurable = (config or {}).get("configurable", {})
        thread = configurable.get(self.thread_key)
        if not isinstance(thread, str) or not thread:
            raise InvalidRequest(
                f"config['configurable'][{self.thread_key!r}] names no conversation: pass "
                f'config={{"configurable": {{"{self.thread_key}": "...", "{self.principal_key}": "..."}}}}',
                field=self.thread_key,
            )
        principal = configurable.get(self.principal_key)
        return thread, principal if isinstance(principal, str) and principal else None

    def session(self, config: RunnableConfig | None) -> Session:
        """The memvault session of the run's conversation (one per thread and principal)."""
        return self._entry(config)[0]

    def _entry(self, config: RunnableConfig | None) -> tuple[Session, list[int]]:
        thread, principal = self._ids(config)
        with self._lock:
            entry = self._sessions.get((thread, principal))
            if entry is None:
                entry = (self.runtime.session(thread, principal=principal), [0])
                self._sessions[(thread, principal)] = entry
            return entry

    def toolset(self, config: RunnableConfig | None) -> ToolSet:
        """The tools of the conversation's current turn, bound to its locked scopes."""
        session = self.session(config)
        if not session.locked_scopes:
            raise ToolException("InvalidRequest: no turn started: the graph must run the recall node first")
        return session.tools()

    # -- nodes -----------------------------------------------------------------

    def recall(self, state: MemoryState, config: RunnableConfig) -> dict[str, Any]:
        """Graph node, once per user turn: lock scopes and recall for the last user message (memvault L5-L7).

        Returns ``{"memory": [...]}``: the conversation's current records as
        ``HumanMessage`` objects (``name`` = the slot), never as system messages.

        :raises memvault.lifecycle.TurnFailed: a recall failed; nothing was committed.
        """
        session, turns = self._entry(config)
        last_user = next((m for m in reversed(state["messages"]) if isinstance(m, HumanMessage)), None)
        turns[0] += 1
        session.turn_started(turns[0], _text(last_user) if last_user is not None else "")
        return {"memory": self.records(session)}

    def capture(self, state: MemoryState, config: RunnableConfig) -> dict[str, Any]:
        """Graph node after the model's final answer: complete the turn (capture, memvault L10)."""
        session, turns = self._entry(config)
        answer = next((m for m in reversed(state["messages"]) if isinstance(m, AIMessage)), None)
        session.turn_completed(turns[0], _text(answer) if answer is not None else "")
        return {}

    def records(self, session: Session) -> list[AnyMessage]:
        """The latest record per id (memvault L7) as user-role messages named after their slot."""
        return [_record_message(e) for e in session.projected() if e.kind == "record"]

    @staticmethod
    def model_input(state: MemoryState) -> list[AnyMessage]:
        """What the model node sends: the recalled records, then the conversation."""
        return [*state.get("memory", []), *state["messages"]]

    # -- tools -----------------------------------------------------------------

    def tools(self) -> list[BaseTool]:
        """Every slot's tools as LangChain tools (names, descriptions and JSON Schemas from memvault).

        The list is built once from a probe turn (principal ``memvault-tool-schemas``,
        no input: no recall query runs); each call is bound to the run's own
        conversation and principal. A slot whose scope resolver disables that
        probe principal is not offered.
        """
        probe: TurnStart = self.runtime.session(_SCHEMA_PROBE, principal=_SCHEMA_PROBE).turn_started(0, "")
        tools: list[BaseTool] = []
        for spec in probe.tools.to_openai():
            function = spec["function"]
            tools.append(
                MemvaultTool(
                    name=function["name"],
                    description=function["description"],
                    args_schema=function["parameters"],
                    memory=self,
                )
            )
        return tools


def _record_message(entry: Entry) -> HumanMessage:
    label = f"[memory: {entry.slot}]" if entry.slot else "[memory]"
    return HumanMessage(content=f"{label} {entry.content}", name=entry.slot or "memory")
