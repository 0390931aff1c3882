"""memvault memory for LangGraph and LangChain.

:class:`GraphMemory` gives a graph the slots' tools as LangChain tools and two
nodes: ``recall`` (turn start: the slots recall for the user's message; the
records go into the ``memory`` state key, user-role messages that the model
node puts in front of the conversation) and ``capture`` (turn completed)::

    memory = GraphMemory(runtime)
    graph = StateGraph(MemoryState)
    graph.add_node("recall", memory.recall)
    graph.add_node("agent", call_model)        # model.invoke(memory.model_input(state))
    graph.add_node("tools", ToolNode(memory.tools()))
    graph.add_node("capture", memory.capture)

The conversation (``thread_id``) and the principal (``user_id``) come from the
run's ``config["configurable"]``, never from the model.
"""

from __future__ import annotations

from memvault_langgraph.memory import GraphMemory, MemoryState, MemvaultTool

__all__ = ["GraphMemory", "MemoryState", "MemvaultTool"]
