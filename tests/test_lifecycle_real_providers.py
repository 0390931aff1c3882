"""The agent lifecycle over real providers: sqlite and local-disk (contract L2-L14).

Parametrised over the providers that are installed; a provider whose plugin is
missing is skipped, never faked. Each vault is opened on the provider's
scratch settings in a fresh temporary directory.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memvault
from memvault.contract.errors import ReplayConflict, TurnFailed
from memvault.contract.lifecycle import LifecycleContext
from memvault.default_lifecycle.notes import NOTES_RECORD_ID, NotesStore
from memvault.lifecycle import Runtime, Slot, by_principal, by_session, scope_key
from memvault.registry import get_registry, reset_registry

PROVIDERS = ["sqlite", "local-disk"]


def _settings(name: str, tmp_path: Path) -> dict[str, Any]:
    reset_registry()
    registry = get_registry()
    if name not in registry.names():
        pytest.skip(f"provider {name!r} is not installed (pip install ./plugins/{name})")
    info = registry.get(name)
    assert info.scratch is not None
    return dict(info.scratch(tmp_path))


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    name: str = request.param
    return name, _settings(name, tmp_path)


@pytest.fixture
def vault(provider: tuple[str, dict[str, Any]]) -> Iterator[memvault.Vault]:
    name, settings = provider
    with memvault.open(name, **settings) as v:
        yield v


class Failing:
    """A lifecycle plugin whose turn-start recall raises for one slot."""

    def __init__(self, slot: str) -> None:
        self.slot = slot

    @memvault.hookimpl
    def memvault_recall_turn_started(self, ctx: LifecycleContext) -> Any:
        if ctx.slot == self.slot:
            raise RuntimeError("backend down")
        return None


def runtime_for(vault: memvault.Vault, **slot_options: Any) -> Runtime:
    return Runtime(
        [
            Slot(name="profile", description="Facts about the user.", vault=vault, scope=by_principal, **slot_options),
            Slot(name="notes", description="Your notebook.", vault=vault, scope=by_principal, kind="notes"),
        ],
        workspace_id="w1",
    )


def test_L4_L12_each_principal_reads_only_its_own_partition(vault: memvault.Vault) -> None:
    runtime = runtime_for(vault)
    alice = runtime.session("s1", principal="alice")
    bob = runtime.session("s2", principal="bob")
    a = alice.turn_started(1, "")
    assert a.tools.call(
        "profile__write", {"tier": "AGENT", "content": "Alice prefers metric units.\n", "mode": "append"}
    ).ok
    b = bob.turn_started(1, "Which units do I prefer?")
    assert b.records == ()
    assert b.tools.call("profile__search", {"q": "units"}).data["hits"] == []
    alice.turn_completed(1, "ok")
    again = alice.turn_started(2, "Which units do I prefer?")
    assert [(r.record_id, r.content) for r in again.records] == [("AGENT.md#1", "Alice prefers metric units.")]
    key = scope_key("profile", None, "alice")
    body = vault.read(memvault.ReadRequest(workspace_id="w1", agent_id=key, tier="AGENT")).content
    assert body == "Alice prefers metric units.\n"


def test_L2_an_anonymous_caller_gets_no_recall_and_no_tools(vault: memvault.Vault) -> None:
    start = runtime_for(vault).session("s", principal=None).turn_started(1, "hello")
    assert (start.records, len(start.tools), start.scopes) == ((), 0, {})


def test_L5_L10_a_failing_slot_fails_the_turn_and_commits_nothing(
    provider: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    name, settings = provider
    with memvault.open(name, **settings) as good, memvault.open(name, plugins=[Failing("broken")], **settings) as bad:
        key = scope_key("profile", None, "alice")
        good.retain(
            memvault.RetainRequest(
                workspace_id="w1", agent_id=key, tier="pins", content="Tea, no sugar.\n", mode="append"
            )
        )
        runtime = Runtime(
            [
                Slot(name="profile", description="p", vault=good, scope=by_principal),
                Slot(name="broken", description="b", vault=bad, scope=by_principal),
            ],
            workspace_id="w1",
        )
        session = runtime.session("s", principal="alice")
        with pytest.raises(TurnFailed) as info:
            session.turn_started(1, "tea")
        assert info.value.slot == "broken"
        assert session.entries() == []


def test_L7_L8_a_changed_line_supersedes_and_a_replay_is_a_no_op(vault: memvault.Vault) -> None:
    key = scope_key("profile", None, "alice")

    def pins(text: str) -> None:
        vault.retain(memvault.RetainRequest(workspace_id="w1", agent_id=key, tier="pins", content=text, mode="replace"))

    session = runtime_for(vault).session("s", principal="alice")
    pins("Meeting on Monday.\n")
    session.turn_started(1, "when is the meeting")
    session.turn_completed(1, "Monday.")
    before = session.entries()
    assert session.turn_started(1, "when is the meeting").replayed  # L8: same result, no-op
    assert session.entries() == before
    pins("Meeting on Tuesday.\n")
    with pytest.raises(ReplayConflict):
        session.turn_started(1, "when is the meeting")  # L8: same id, different result
    session.turn_started(2, "when is the meeting")
    records = [m.content for m in session.projected() if m.kind == "record"]
    assert records == ["Meeting on Tuesday."]  # L7: pins.md#1 superseded


def test_L9_compaction_keeps_records_and_recalls_against_the_checkpoint(vault: memvault.Vault) -> None:
    key = scope_key("profile", None, "alice")
    vault.retain(
        memvault.RetainRequest(
            workspace_id="w1", agent_id=key, tier="AGENT", content="Project Falcon ships in May.\n", mode="append"
        )
    )
    session = runtime_for(vault).session("s", principal="alice")
    session.turn_started(1, "hello there")
    session.turn_completed(1, "hi")
    plan = session.compaction_requested()
    assert [m.content for m in plan.messages] == ["hello there", "hi"]
    added = session.compaction_completed("We talked about project Falcon.")
    assert [(e.record_id, e.content) for e in added] == [("AGENT.md#1", "Project Falcon ships in May.")]
    assert session.messages()[0].content == "We talked about project Falcon."


def test_capture_appends_the_turn_to_today_daily_when_opted_in(vault: memvault.Vault) -> None:
    session = runtime_for(vault, capture=True).session("s", principal="alice")
    session.turn_started(1, "Book the flight to Oslo.")
    session.turn_completed(1, "Booked for Friday.")
    key = scope_key("profile", None, "alice")
    daily = vault.read(memvault.ReadRequest(workspace_id="w1", agent_id=key, tier="daily")).content
    assert re.fullmatch(r"- \S+Z \u2014 user: Book the flight to Oslo\. \| assistant: Booked for Friday\.\n", daily)


def test_L13_memory_tools_round_trip(vault: memvault.Vault) -> None:
    tools = runtime_for(vault).session("s", principal="alice").turn_started(1, "").tools
    assert tools.call(
        "profile__write", {"tier": "peers", "key": "bob", "content": "Bob runs ops.\n", "mode": "replace"}
    ).ok
    assert tools.call("profile__append_daily", {"entry": "Met Bob."}).ok
    assert tools.call("profile__read", {"tier": "peers", "key": "bob"}).data["content"] == "Bob runs ops.\n"
    hits = tools.call("profile__search", {"q": "who runs ops", "limit": 5}).data["hits"]
    assert [h["source"] for h in hits] == ["peers/bob.md"]
    assert not tools.call("profile__write", {"tier": "lessons", "content": "x", "mode": "append"}).ok
    assert tools.call("profile__nope", {}).error == "UnknownTool"


def test_L11_clear_leaves_the_store(vault: memvault.Vault) -> None:
    session = runtime_for(vault).session("s", principal="alice")
    tools = session.turn_started(1, "").tools
    assert tools.call("notes__save", {"entry": "Keep me."}).ok
    session.clear()
    assert session.entries() == []
    start = session.turn_started(1, "")
    assert [r.record_id for r in start.records] == [NOTES_RECORD_ID]


def test_L14_notes_over_a_real_provider(vault: memvault.Vault) -> None:
    session = runtime_for(vault).session("s", principal="alice")
    tools = session.turn_started(1, "").tools
    assert tools.call("notes__save", {"entry": "one"}).data == {"version": 1, "index": 1, "changed": True}
    assert tools.call("notes__save", {"entry": " one "}).data == {"version": 1, "index": 1, "changed": False}
    assert tools.call("notes__save", {"entry": "two"}).ok
    assert tools.call("notes__remove", {"index": 1}).ok
    assert tools.call("notes__save", {"entry": "three"}).data["index"] == 3
    assert tools.call("notes__save", {"entry": "x", "expected_version": 1}).error == "NotesConflict"
    session.turn_completed(1, "ok")
    start = session.turn_started(2, "")
    assert [r.content for r in start.records] == ["Notes (version 4):\n[2] two\n[3] three\n"]


def test_L14_a_notes_document_larger_than_any_tier_cap_fits(vault: memvault.Vault) -> None:
    store = NotesStore(vault, workspace_id="w1", agent_id="big-notes")
    for n in range(20):
        store.save(f"{n:02d} " + "y" * 2000)
    doc = store.load()
    assert len(doc.entries) == 20
    assert doc.size > 40_000  # over the daily cap of 30000: the log spans two segments


_WRITER = textwrap.dedent(
    """
    import json, sys
    import memvault
    from memvault.contract.errors import NotesConflict
    from memvault.default_lifecycle.notes import NotesStore
    name, settings, n, expected = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with memvault.open(name, **settings) as vault:
        store = NotesStore(vault, workspace_id="w1", agent_id="shared-notes")
        if expected == "none":
            for k in range(3):
                store.save(f"process {n} note {k}")
            print("ok")
        else:
            try:
                store.save(f"process {n}", expected_version=int(expected))
                print("ok")
            except NotesConflict:
                print("conflict")
    """
)


def _run_writers(name: str, settings: dict[str, Any], expected: str, count: int = 4) -> list[str]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, name, json.dumps(settings), str(n), expected],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(count)
    ]
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outputs.append(out.strip())
    return outputs


def test_L14_writers_in_several_processes_lose_nothing(provider: tuple[str, dict[str, Any]]) -> None:
    name, settings = provider
    assert _run_writers(name, settings, "none") == ["ok"] * 4
    with memvault.open(name, **settings) as vault:
        doc = NotesStore(vault, workspace_id="w1", agent_id="shared-notes").load()
    assert sorted(doc.entries.values()) == sorted(f"process {n} note {k}" for n in range(4) for k in range(3))


def test_L14_writers_in_several_processes_with_one_expected_version_one_wins(
    provider: tuple[str, dict[str, Any]],
) -> None:
    name, settings = provider
    outcomes = _run_writers(name, settings, "0")
    assert sorted(outcomes) == ["conflict"] * 3 + ["ok"]
    with memvault.open(name, **settings) as vault:
        doc = NotesStore(vault, workspace_id="w1", agent_id="shared-notes").load()
    assert doc.version == 1
    assert len(doc.entries) == 1


def test_session_visibility_keeps_two_sessions_apart(vault: memvault.Vault) -> None:
    runtime = Runtime(
        [Slot(name="scratch", description="s", vault=vault, scope=by_principal, visibility="session")],
        workspace_id="w1",
    )
    one = runtime.session("s1", principal="alice").turn_started(1, "").tools
    two = runtime.session("s2", principal="alice").turn_started(1, "").tools
    assert one.call("scratch__write", {"tier": "pins", "content": "draft A", "mode": "replace"}).ok
    assert two.call("scratch__read", {"tier": "pins"}).data["content"] == ""


def test_by_session_scopes_memory_to_the_conversation(vault: memvault.Vault) -> None:
    runtime = Runtime([Slot(name="conv", description="c", vault=vault, scope=by_session)], workspace_id="w1")
    first = runtime.session("chat-1").turn_started(1, "").tools
    assert first.call("conv__write", {"tier": "AGENT", "content": "topic: taxes", "mode": "replace"}).ok
    again = runtime.session("chat-1").turn_started(1, "").tools
    assert again.call("conv__read", {"tier": "AGENT"}).data["content"] == "topic: taxes"
    other = runtime.session("chat-2").turn_started(1, "").tools
    assert other.call("conv__read", {"tier": "AGENT"}).data["content"] == ""


EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "agent_loop.py"


@pytest.mark.parametrize("flags", [[], ["--memory"]], ids=["installed-providers", "memory"])
def test_the_agent_loop_example_runs_and_shows_recall_capture_tools_and_compaction(flags: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), *flags], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    reset_registry()
    installed = set(get_registry().names())
    if not flags and {"sqlite", "local-disk"} <= installed:
        assert out.splitlines()[0] == "profile slot on 'sqlite', notes slot on 'local-disk'"
    assert "recalled [profile] Prefers metric units." in out  # recall across sessions
    assert "assistant: I'll write the report in metric units." in out
    assert "The report was due Friday" in out  # the notes record survived compaction
    assert "tool notes__remove" in out
    assert "ok=False" not in out
    assert "another user sees 0 records" in out
    assert "captured daily log: 4 lines" in out  # 3 captured turns + 1 append_daily


class Scripted:
    """A plugin answering turn-start recall and tools with what the test says."""

    def __init__(self, recall: Any = None, tools: Any = None, capture_raises: bool = False) -> None:
        self.recall, self.tools, self.capture_raises = recall, tools, capture_raises

    @memvault.hookimpl
    def memvault_recall_turn_started(self, ctx: LifecycleContext) -> Any:
        return self.recall

    @memvault.hookimpl
    def memvault_tools(self, ctx: LifecycleContext) -> Any:
        if self.tools == "raise":
            raise RuntimeError("tools backend down")
        return None

    @memvault.hookimpl
    def memvault_capture_turn_completed(self, ctx: LifecycleContext) -> Any:
        if self.capture_raises:
            raise RuntimeError("capture backend down")
        return None


def test_L1_L3_an_invalid_slot_or_scope_is_rejected_before_the_provider_is_touched(vault: memvault.Vault) -> None:
    with pytest.raises(memvault.InvalidRequest, match="L1"):
        Slot(name="9lives", description="", vault=vault, scope=by_principal)
    runtime = Runtime(
        [Slot(name="wide", description="", vault=vault, scope=lambda ctx: ("x" * 1025,))], workspace_id="w1"
    )
    session = runtime.session("s", principal="alice")
    with pytest.raises(memvault.InvalidRequest, match="L3"):
        session.turn_started(1, "hello")
    assert session.entries() == []


def test_L6_an_invalid_recall_result_fails_the_turn(provider: tuple[str, dict[str, Any]]) -> None:
    name, settings = provider
    bad = {"messages": [{"content": "a", "id": "x"}, {"content": "b", "id": "x"}]}
    with memvault.open(name, plugins=[Scripted(recall=bad)], **settings) as v:
        session = Runtime([Slot(name="m", description="", vault=v, scope=by_principal)]).session("s", principal="a")
        with pytest.raises(TurnFailed) as info:
            session.turn_started(1, "hi")
    assert "duplicate id" in str(info.value.__cause__)
    assert session.entries() == []


def test_L10_failing_tools_and_captures_are_logged_and_the_turn_stands(
    provider: tuple[str, dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    name, settings = provider
    with memvault.open(name, plugins=[Scripted(tools="raise", capture_raises=True)], **settings) as v:
        session = Runtime([Slot(name="m", description="", vault=v, scope=by_principal)]).session("s", principal="a")
        with caplog.at_level("WARNING", logger="memvault.lifecycle"):
            start = session.turn_started(1, "hi")
            session.turn_completed(1, "answer")
    assert len(start.tools) == 0
    assert [m.content for m in session.messages()] == ["hi", "answer"]
    assert "tools omitted" in caplog.text
    assert "capture failed" in caplog.text


@pytest.mark.parametrize("name", PROVIDERS)
def test_random_turns_and_compactions_keep_principals_apart_and_latest_values(name: str, tmp_path: Path) -> None:
    """A bounded property run over the real provider (L4, L5, L9, L12)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    base = _settings(name, tmp_path)
    step = st.tuples(
        st.sampled_from(["alice", "bob"]),
        st.sampled_from(["turn", "write", "compact"]),
        st.sampled_from(["p1", "p2"]),
        st.text(alphabet="xyz", min_size=1, max_size=3),
    )
    runs = iter(range(10**6))

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(steps=st.lists(step, min_size=1, max_size=10))
    def run(steps: list[tuple[str, str, str, str]]) -> None:
        fresh = tmp_path / f"run{next(runs)}"
        fresh.mkdir()
        info = get_registry().get(name)
        assert info.scratch is not None
        with memvault.open(name, **dict(info.scratch(fresh))) as v:
            runtime = Runtime([Slot(name="mem", description="", vault=v, scope=by_principal)], workspace_id="w")
            sessions = {who: runtime.session(f"s-{who}", principal=who) for who in ("alice", "bob")}
            written: dict[str, dict[str, str]] = {"alice": {}, "bob": {}}
            turns = {"alice": 0, "bob": 0}
            for who, action, key, value in steps:
                session = sessions[who]
                if action == "turn" or turns[who] == 0:
                    turns[who] += 1
                    session.turn_started(turns[who], "secret")
                    session.turn_completed(turns[who], "ok")
                if action == "write":
                    text = f"{who} secret {value}"
                    assert (
                        session.tools()
                        .call("mem__write", {"tier": "peers", "key": key, "content": text, "mode": "replace"})
                        .ok
                    )
                    written[who][key] = text
                elif action == "compact":
                    session.compact(lambda messages: "secret summary")
                for me, other in (("alice", "bob"), ("bob", "alice")):
                    seen = "\n".join(m.content for m in sessions[me].messages())
                    assert f"{other} secret" not in seen
                    if turns[me]:
                        for k, text in written[me].items():
                            got = sessions[me].tools().call("mem__read", {"tier": "peers", "key": k})
                            assert got.data["content"] == text

    assert base  # the provider is installed (else _settings skipped)
    run()
