"""Property: random interleavings of turns, captures, compactions and failures (L5, L7, L9, L10, L12).

Two principals share one runtime with two slots: ``mem`` (the default
lifecycle over the `memory` provider, scope ``by_principal``, visibility
``scope``, capturing every turn into the daily tier) and ``facts`` (a scripted
recall that returns keyed records, fails, or returns an invalid result, and a
capture that may fail, as the drawn step says). After every step:

* a failed turn or compaction committed nothing partial (history unchanged,
  or for a failed completed-recall only the checkpoint), and a failing capture
  never undoes the completed turn;
* one principal's records never appear in the other's history;
* every keyed record's latest committed value is the one projected, and the
  latest value written through a tool is the one read back.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import memvault
from memvault.contract.errors import CompactionFailed, TurnFailed
from memvault.contract.lifecycle import LifecycleContext
from memvault.lifecycle import Runtime, Session, Slot, by_principal

WHO = st.sampled_from(["alice", "bob"])
RECORDS = st.lists(
    st.tuples(st.sampled_from(["k1", "k2", "k3", None]), st.text(alphabet="xyz", min_size=1, max_size=3)),
    max_size=3,
    unique_by=lambda r: r[0] if r[0] is not None else object(),
)
STEP = st.one_of(
    st.tuples(st.just("turn"), WHO, st.sampled_from(["ok", "ok", "raise", "invalid"]), RECORDS, st.booleans()),
    st.tuples(st.just("write"), WHO, st.sampled_from(["p1", "p2"]), st.text(alphabet="xyz", min_size=1, max_size=4)),
    st.tuples(st.just("compact"), WHO, st.booleans(), st.sampled_from(["ok", "capture fails", "recall fails"])),
)


class Control:
    """What the scripted ``facts`` slot does on its next call."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.records: list[tuple[str | None, str]] = []
        self.compaction = "ok"
        self.capture_fails = False

    def _outcome(self) -> Any:
        if self.mode == "raise":
            raise RuntimeError("facts backend down")
        if self.mode == "invalid":
            return {"messages": [{"content": ""}]}
        return {"messages": [{"id": i, "content": c} if i else {"content": c} for i, c in self.records]}

    @memvault.hookimpl
    def memvault_recall_turn_started(self, ctx: LifecycleContext) -> Any:
        if ctx.slot != "facts":
            return None
        return self._outcome()

    @memvault.hookimpl
    def memvault_recall_compaction_completed(self, ctx: LifecycleContext) -> Any:
        if ctx.slot != "facts":
            return None
        if self.compaction == "recall fails":
            raise RuntimeError("facts backend down")
        return None

    @memvault.hookimpl
    def memvault_capture_turn_completed(self, ctx: LifecycleContext) -> Any:
        if ctx.slot == "facts" and self.capture_fails:
            raise RuntimeError("capture store down")
        return None

    @memvault.hookimpl
    def memvault_capture_compaction_requested(self, ctx: LifecycleContext) -> Any:
        if ctx.slot == "facts" and self.compaction == "capture fails":
            raise RuntimeError("capture store down")
        return None


def _facts(session: Session) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for e in session.projected():
        if e.kind == "record" and e.slot == "facts" and e.record_id is not None:
            out.setdefault(e.record_id, []).append(e.content)
    return out


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(STEP, max_size=18))
def test_random_interleavings_never_commit_partially_never_leak_never_lose_the_latest(
    steps: list[tuple[Any, ...]],
) -> None:
    control = Control()
    with memvault.open("memory") as mem_vault, memvault.open("memory", plugins=[control]) as facts_vault:
        runtime = Runtime(
            [
                Slot(name="mem", description="m", vault=mem_vault, scope=by_principal, capture=True),
                Slot(name="facts", description="f", vault=facts_vault, scope=by_principal),
            ],
            workspace_id="w",
        )
        sessions = {who: runtime.session(f"s-{who}", principal=who) for who in ("alice", "bob")}
        turn = {"alice": 0, "bob": 0}
        started = {"alice": False, "bob": False}
        latest: dict[str, dict[str, str]] = {"alice": {}, "bob": {}}
        written: dict[str, dict[str, str]] = {"alice": {}, "bob": {}}
        for step in steps:
            kind, who = step[0], step[1]
            session = sessions[who]
            before = session.entries()
            if kind == "turn":
                _, _, mode, records, capture_fails = step
                control.mode, control.records, control.capture_fails = mode, records, capture_fails
                turn[who] += 1
                try:
                    session.turn_started(turn[who], "secret")
                except TurnFailed:
                    assert mode != "ok"
                    assert session.entries() == before  # L5: nothing partial
                else:
                    assert mode == "ok"
                    started[who] = True
                    for record_id, content in records:
                        if record_id is not None:
                            latest[who][record_id] = content
                    session.turn_completed(turn[who], f"answer {turn[who]}")  # a failing capture only logs
                    assert session.messages()[-1].content == f"answer {turn[who]}"
            elif kind == "write":
                _, _, key, value = step
                if not started[who]:
                    continue
                tools = session.tools()
                text = f"{who} secret {value}"
                assert tools.call("mem__write", {"tier": "peers", "key": key, "content": text, "mode": "replace"}).ok
                written[who][key] = text
            else:
                _, _, automatic, compaction = step
                control.compaction = compaction
                in_turn = turn[who] if (automatic and started[who]) else None
                try:
                    session.compact(lambda messages: "summary", turn=in_turn)
                except CompactionFailed:
                    assert compaction == "capture fails"
                    assert session.entries() == before  # L10: history unchanged
                except TurnFailed:
                    assert compaction == "recall fails"
                    assert in_turn is not None
                else:
                    assert compaction != "capture fails"
            # -- invariants, for both principals --------------------------------
            for name, other in (("alice", "bob"), ("bob", "alice")):
                text = "\n".join(m.content for m in sessions[name].messages())
                assert f"{other} secret" not in text  # visibility scope: no leak (L4, L12)
                facts = _facts(sessions[name])
                for record_id, content in latest[name].items():
                    assert facts.get(record_id) == [content]  # L7/L9: the latest value, once
                if started[name]:
                    tools = sessions[name].tools()
                    for key, text_written in written[name].items():
                        got = tools.call("mem__read", {"tier": "peers", "key": key})
                        assert got.data["content"] == text_written
