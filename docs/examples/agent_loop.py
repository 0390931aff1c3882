"""A minimal agent loop with memvault memory: recall, capture, tools and compaction.

Two slots:

* ``profile`` — facts about the user, in a sqlite database, scoped to the
  user (``by_principal``); turns are captured into today's daily log.
* ``notes`` — a numbered notebook on local disk (markdown files), also per user.

The "model" is a scripted fake, so this runs offline and deterministically::

    python docs/examples/agent_loop.py            # sqlite + local-disk
    python docs/examples/agent_loop.py --memory   # the in-process provider only

Without the sqlite / local-disk plugins installed it falls back to ``memory``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import memvault
from memvault.contract.lifecycle import Message
from memvault.lifecycle import Runtime, Session, Slot, by_principal
from memvault.lifecycle.tools import ToolSet
from memvault.registry import get_registry


def open_vaults(root: Path, memory_only: bool) -> tuple[memvault.Vault, memvault.Vault]:
    installed = get_registry().names()
    if not memory_only and "sqlite" in installed:
        profile = memvault.open("sqlite", path=str(root / "profile.db"))
    else:
        profile = memvault.open("memory")
    if not memory_only and "local-disk" in installed:
        notes = memvault.open("local-disk", root=str(root / "notes"))
    else:
        notes = memvault.open("memory")
    return profile, notes


class ScriptedModel:
    """Stands in for an LLM: per turn, a list of tool calls and a final answer.

    A real loop would send ``session.messages()`` and ``tools.to_openai()`` (or
    ``to_anthropic()`` / ``to_mcp()``) to the model API instead.
    """

    def respond(self, turn: int, messages: Sequence[Message], tools: ToolSet) -> tuple[list[tuple[str, Any]], str]:
        context = "\n".join(m.content for m in messages)
        if turn == 1:
            calls = [
                ("profile__write", {"tier": "AGENT", "content": "Prefers metric units.\n", "mode": "append"}),
                ("notes__save", {"entry": "User's name is Dana."}),
                ("notes__save", {"entry": "Report is due on Friday."}),
            ]
            return calls, "Noted: metric units, and I'll remember the Friday deadline."
        if turn == 2:
            units = "metric" if "metric units" in context else "whatever you like"
            return [("profile__search", {"q": "units"})], f"I'll write the report in {units} units."
        if turn == 3:
            due = "Friday" if "due on Friday" in context else "an unknown day"
            return [("notes__remove", {"index": 2}), ("profile__append_daily", {"entry": "Report sent."})], (
                f"The report was due {due}; I've crossed it off."
            )
        return [], "Anything else?"


def summarise(messages: Sequence[Message]) -> str:
    """A stand-in for asking the model to summarise the conversation so far."""
    return f"Summary: {len(messages)} earlier messages about Dana's report."


def run_turn(session: Session, model: ScriptedModel, turn: int, user_text: str, log: list[str]) -> None:
    start = session.turn_started(turn, user_text)  # recall for every slot, all-or-nothing
    log.append(f"--- turn {turn}: user: {user_text}")
    for record in start.records:
        text = record.content.strip().replace("\n", " / ")
        log.append(f"    recalled [{record.slot}] {text}")
    calls, answer = model.respond(turn, session.messages(), start.tools)
    for name, arguments in calls:
        result = start.tools.call(name, arguments)  # errors come back as results, never raise
        log.append(f"    tool {name}({json.dumps(arguments)}) -> ok={result.ok}")
        session.add_message("tool", f"{name}: {result.content}")
    session.turn_completed(turn, answer)  # capture
    log.append(f"    assistant: {answer}")


def main(argv: Sequence[str] = ()) -> list[str]:
    memory_only = "--memory" in argv
    log: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        profile_vault, notes_vault = open_vaults(Path(tmp), memory_only)
        log.append(f"profile slot on {profile_vault.name!r}, notes slot on {notes_vault.name!r}")
        runtime = Runtime(
            [
                Slot(
                    name="profile",
                    description="Long-term facts about the user.",
                    vault=profile_vault,
                    scope=by_principal,
                    capture=True,
                ),
                Slot(
                    name="notes",
                    description="The user's numbered notebook.",
                    vault=notes_vault,
                    scope=by_principal,
                    kind="notes",
                ),
            ],
            workspace_id="demo",
        )
        model = ScriptedModel()
        first = runtime.session("chat-1", principal="dana")
        run_turn(first, model, 1, "Use metric units please. My report is due Friday.", log)

        second = runtime.session("chat-2", principal="dana")  # a new conversation, same user
        run_turn(second, model, 2, "Which units should the report use?", log)

        added = second.compact(summarise)  # standalone compaction, then recall on the checkpoint
        log.append(f"--- compaction: history is now {len(second.messages())} messages; re-recalled {len(added)}")

        run_turn(second, model, 3, "When was the report due?", log)

        stranger = runtime.session("chat-3", principal="eve").turn_started(1, "Which units?")
        log.append(f"--- another user sees {len(stranger.records)} records")

        daily = profile_vault.read(
            memvault.ReadRequest(workspace_id="demo", agent_id=first.locked_scopes["profile"].scope_key, tier="daily")
        ).content
        log.append(f"--- captured daily log: {len(daily.splitlines())} lines")
        profile_vault.close()
        notes_vault.close()
    return log


if __name__ == "__main__":
    print("\n".join(main(sys.argv[1:])))
