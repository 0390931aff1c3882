"""memvault memory for the OpenAI Agents SDK.

:class:`AgentMemory` ties one conversation's memvault lifecycle session to
``Runner.run``::

    memory = AgentMemory(runtime, "chat-1", principal="dana")
    result = await memory.run(agent, "Which units do I prefer?")

Each run is one memvault turn: the slots recall for the user's message (the
records reach the model as user-role messages through
``RunConfig.call_model_input_filter``, never as instructions), the agent gets
the slots' tools as ``FunctionTool`` objects bound to the locked scope, and
the final output is captured when the run completes.
"""

from __future__ import annotations

from memvault_openai_agents.memory import AgentMemory, function_tools, record_messages

__all__ = ["AgentMemory", "function_tools", "record_messages"]
