"""The agent lifecycle over the `memory` provider: slots, scopes, turns, compaction (contract L1-L11).

Each test names the contract line it checks. Scripted lifecycle plugins stand in
for a provider that overrides a phase: they are registered in the slot's vault
without ``trylast``, so they answer before the core's default lifecycle plugin.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import memvault
from memvault.contract.errors import CompactionFailed, ReplayConflict, TurnCancelled, TurnFailed
from memvault.contract.lifecycle import (
    MAX_RECORD_ENTRIES,
    LifecycleContext,
    Message,
    RecalledMessage,
    RecallOutcome,
    ScopeContext,
    Tool,
)
from memvault.lifecycle import (
    Runtime,
    Slot,
    by_principal,
    by_session,
    by_value,
    canonical_encoding,
    operation_id,
    scope_key,
)

Recall = Callable[[LifecycleContext], Any]


class Scripted:
    """A lifecycle plugin whose phases run the callables a test gives it."""

    def __init__(
        self,
        *,
        turn_started: Recall | None = None,
        compaction_completed: Recall | None = None,
        turn_completed: Recall | None = None,
        compaction_requested: Recall | None = None,
        tools: Recall | None = None,
    ) -> None:
        self.calls: list[tuple[str, LifecycleContext]] = []
        self._turn_started = turn_started
        self._compaction_completed = compaction_completed
        self._turn_completed = turn_completed
        self._compaction_requested = compaction_requested
        self._tools = tools

    def _run(self, phase: str, fn: Recall | None, ctx: LifecycleContext) -> Any:
        self.calls.append((phase, ctx))
        return fn(ctx) if fn is not None else None

    @memvault.hookimpl
    def memvault_recall_turn_started(self, ctx: LifecycleContext) -> Any:
        return self._run("turn.started", self._turn_started, ctx)

    @memvault.hookimpl
    def memvault_recall_compaction_completed(self, ctx: LifecycleContext) -> Any:
        return self._run("compaction.completed", self._compaction_completed, ctx)

    @memvault.hookimpl
    def memvault_capture_turn_completed(self, ctx: LifecycleContext) -> Any:
        return self._run("turn.completed", self._turn_completed, ctx)

    @memvault.hookimpl
    def memvault_capture_compaction_requested(self, ctx: LifecycleContext) -> Any:
        return self._run("compaction.requested", self._compaction_requested, ctx)

    @memvault.hookimpl
    def memvault_tools(self, ctx: LifecycleContext) -> Any:
        return self._run("tools", self._tools, ctx)


def returns(*messages: tuple[str | None, str]) -> Recall:
    return lambda ctx: {"messages": [{"id": i, "content": c} if i else {"content": c} for i, c in messages]}


def raises(ctx: LifecycleContext) -> Any:
    raise RuntimeError("recall backend down")


@pytest.fixture
def vaults() -> Iterator[list[memvault.Vault]]:
    opened: list[memvault.Vault] = []
    yield opened
    for v in opened:
        v.close()


@pytest.fixture
def make_vault(vaults: list[memvault.Vault]) -> Callable[..., memvault.Vault]:
    def make(*plugins: object) -> memvault.Vault:
        # Words only: with an embedder installed (a dev venv) a turn's recall also finds lines by meaning,
        # as soon as the background worker embedded them, and what a compaction adds would race it.
        v = memvault.open("memory", plugins=list(plugins), embedder="off")
        vaults.append(v)
        return v

    return make


def slot(name: str, vault: memvault.Vault, **kw: Any) -> Slot:
    kw.setdefault("scope", by_principal)
    return Slot(name=name, description=f"The {name} memory.", vault=vault, **kw)


# -- L1 slots --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "profile", "Notes_2", "x-y", "A" * 64])
def test_L1_slot_names_of_the_allowed_shape_are_accepted(name: str, make_vault: Callable[..., memvault.Vault]) -> None:
    assert slot(name, make_vault()).name == name


@pytest.mark.parametrize("name", ["", "1abc", "_x", "-x", "a b", "a.b", "a/b", "é", "a__", "A" * 65])
def test_L1_slot_names_outside_the_rule_are_invalid(name: str, make_vault: Callable[..., memvault.Vault]) -> None:
    if name == "a__":  # double underscore is allowed by the rule; it only looks odd
        assert slot(name, make_vault()).name == name
        return
    with pytest.raises(memvault.InvalidRequest, match=r"L1"):
        slot(name, make_vault())


def test_L1_slot_binds_description_provider_resolver_namespace_visibility(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    v = make_vault()
    s = Slot(
        name="team", description="Shared.", vault=v, scope=by_value("crew-1"), namespace="ns", visibility="session"
    )
    assert (s.description, s.vault, s.namespace, s.visibility) == ("Shared.", v, "ns", "session")


def test_L1_visibility_other_than_scope_or_session_is_invalid(make_vault: Callable[..., memvault.Vault]) -> None:
    with pytest.raises(memvault.InvalidRequest, match="visibility"):
        slot("a", make_vault(), visibility="global")


def test_L1_a_slot_accepts_an_async_vault_as_its_provider(make_vault: Callable[..., memvault.Vault]) -> None:
    v = make_vault()
    assert slot("a", memvault.AsyncVault(v)).vault is v


def test_L1_a_scope_that_is_not_a_resolver_is_invalid(make_vault: Callable[..., memvault.Vault]) -> None:
    with pytest.raises(memvault.InvalidRequest, match="resolver"):
        slot("a", make_vault(), scope="alice")


def test_L1_runtime_rejects_two_slots_with_one_name(make_vault: Callable[..., memvault.Vault]) -> None:
    v = make_vault()
    with pytest.raises(memvault.InvalidRequest, match="unique"):
        Runtime([slot("a", v), slot("a", v)])


# -- L2 resolution order -----------------------------------------------------------


def test_L2_a_none_scope_disables_the_slot_no_namespace_no_provider_no_tools(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    namespaces: list[ScopeContext] = []
    plugin = Scripted(turn_started=returns(("k", "never")))

    def namespace(ctx: ScopeContext) -> str:
        namespaces.append(ctx)
        return "ns"

    runtime = Runtime([slot("off", make_vault(plugin), scope=lambda ctx: None, namespace=namespace)], workspace_id="w")
    session = runtime.session("s1", principal="alice")
    start = session.turn_started(1, "hello")
    assert namespaces == []
    assert plugin.calls == []
    assert len(start.tools) == 0
    assert start.scopes == {}


def test_L2_by_principal_gives_none_for_anonymous_callers(make_vault: Callable[..., memvault.Vault]) -> None:
    plugin = Scripted(turn_started=returns(("k", "x")))
    runtime = Runtime([slot("p", make_vault(plugin))])
    runtime.session("s1", principal=None).turn_started(1, "hi")
    runtime.session("s2", principal="").turn_started(1, "hi")
    assert plugin.calls == []
    runtime.session("s3", principal="alice").turn_started(1, "hi")
    assert [phase for phase, _ in plugin.calls if phase == "turn.started"] == ["turn.started"]


def test_L2_by_session_and_by_value_resolve_to_the_session_id_and_the_value() -> None:
    ctx = ScopeContext(session_id="s9", principal="alice", turn=1, slot="a")
    assert by_session(ctx) == "s9"
    assert by_value(("team", "red"))(ctx) == ("team", "red")
    assert by_principal(ctx) == "alice"


def test_L2_a_namespace_callable_is_resolved_after_the_scope(make_vault: Callable[..., memvault.Vault]) -> None:
    order: list[str] = []

    def scope(ctx: ScopeContext) -> str:
        order.append("scope")
        return "alice"

    def namespace(ctx: ScopeContext) -> str:
        order.append("namespace")
        return "ns"

    runtime = Runtime([slot("a", make_vault(), scope=scope, namespace=namespace)])
    start = runtime.session("s").turn_started(1, "")
    assert order == ["scope", "namespace"]
    assert start.scopes["a"].namespace == "ns"


# -- L3 limits -----------------------------------------------------------------


def test_L3_namespace_must_be_non_blank() -> None:
    with pytest.raises(memvault.InvalidRequest, match=r"namespace is blank \(L3\)"):
        canonical_encoding("  ", "alice")


def test_L3_namespace_at_most_1024_utf8_bytes() -> None:
    canonical_encoding("n" * 1024, "alice")
    with pytest.raises(memvault.InvalidRequest, match=r"namespace is 1026 UTF-8 bytes.*1024 \(L3\)"):
        canonical_encoding("é" * 513, "alice")


@pytest.mark.parametrize("count", [0, 17])
def test_L3_a_scope_tuple_has_1_to_16_components(count: int) -> None:
    with pytest.raises(memvault.InvalidRequest, match=r"1 to 16"):
        canonical_encoding(None, tuple("c" for _ in range(count)))


def test_L3_sixteen_components_are_allowed() -> None:
    assert canonical_encoding(None, tuple(f"c{i}" for i in range(16)))


@pytest.mark.parametrize("scope", ["", "   ", ("a", " "), ("\t",)])
def test_L3_scope_components_must_be_non_blank(scope: Any) -> None:
    with pytest.raises(memvault.InvalidRequest, match=r"blank \(L3\)"):
        canonical_encoding(None, scope)


def test_L3_scope_components_at_most_1024_bytes() -> None:
    canonical_encoding(None, ("x" * 1024,))
    with pytest.raises(memvault.InvalidRequest, match=r"over the limit of 1024 \(L3\)"):
        canonical_encoding(None, ("x" * 1025,))


def test_L3_combined_canonical_encoding_at_most_4096_bytes() -> None:
    canonical_encoding("n" * 1000, ("x" * 1000, "y" * 1000, "z" * 1000))  # 4 * (1000 + 4) + 4: fits
    with pytest.raises(memvault.InvalidRequest, match=r"combined limit of 4096 \(L3\)"):
        canonical_encoding("n" * 1000, ("x" * 1000, "y" * 1000, "z" * 1000, "w" * 100))


@pytest.mark.parametrize("scope", [42, None, ("a", 1), (("a",),), b"bytes"])
def test_L3_scopes_are_strings_or_tuples_of_strings(scope: Any) -> None:
    with pytest.raises(memvault.InvalidRequest, match=r"L3"):
        canonical_encoding(None, scope)


def test_L3_an_invalid_scope_at_turn_start_commits_nothing(make_vault: Callable[..., memvault.Vault]) -> None:
    plugin = Scripted(turn_started=returns(("k", "fact")))
    runtime = Runtime([slot("ok", make_vault(plugin)), slot("bad", make_vault(), scope=lambda c: ("x",) * 17)])
    session = runtime.session("s", principal="alice")
    with pytest.raises(memvault.InvalidRequest, match=r"1 to 16"):
        session.turn_started(1, "hello")
    assert session.entries() == []
    assert plugin.calls == []  # scopes resolve before any recall (L5)


# -- L4 scope keys ---------------------------------------------------------------

_KEY = re.compile(r"memscope1_[A-Za-z0-9_-]{43}")


def test_L4_scope_key_is_versioned_base64url_sha256_without_padding() -> None:
    key = scope_key("profile", None, "alice")
    assert _KEY.fullmatch(key)
    assert len(key) == 53
    raw = base64.urlsafe_b64decode(key.removeprefix("memscope1_") + "=")
    assert len(raw) == hashlib.sha256().digest_size


def test_L4_scope_key_is_deterministic() -> None:
    assert scope_key("p", "ns", ("a", "b")) == scope_key("p", "ns", ("a", "b"))


def test_L4_a_scalar_scope_and_a_one_element_tuple_differ() -> None:
    assert scope_key("p", None, "alice") != scope_key("p", None, ("alice",))


def test_L4_different_namespaces_and_slots_give_different_keys() -> None:
    keys = {
        scope_key("p", None, "alice"),
        scope_key("p", "ns1", "alice"),
        scope_key("p", "ns2", "alice"),
        scope_key("q", None, "alice"),
        scope_key("q", "ns1", "alice"),
    }
    assert len(keys) == 5


def test_L4_the_encoding_is_length_prefixed_so_boundaries_cannot_collide() -> None:
    assert scope_key("p", None, ("ab", "c")) != scope_key("p", None, ("a", "bc"))
    assert scope_key("p", "a", ("b",)) != scope_key("p", None, ("a", "b"))
    assert canonical_encoding(None, ("ab", "c")) != canonical_encoding(None, ("a", "bc"))


def test_L4_session_visibility_keys_the_partition_by_session_too() -> None:
    shared = scope_key("p", None, "alice", visibility="scope", session_id="s1")
    assert shared == scope_key("p", None, "alice", visibility="scope", session_id="s2")
    one = scope_key("p", None, "alice", visibility="session", session_id="s1")
    two = scope_key("p", None, "alice", visibility="session", session_id="s2")
    assert len({shared, one, two}) == 3


def test_L4_the_scope_key_is_the_agent_id_of_the_slot_partition(make_vault: Callable[..., memvault.Vault]) -> None:
    v = make_vault()
    runtime = Runtime([slot("profile", v)], workspace_id="w1")
    start = runtime.session("s", principal="alice").turn_started(1, "")
    assert start.tools.call("profile__write", {"tier": "AGENT", "content": "likes tea\n", "mode": "append"}).ok
    key = scope_key("profile", None, "alice")
    assert start.scopes["profile"].scope_key == key
    body = v.read(memvault.ReadRequest(workspace_id="w1", agent_id=key, tier="AGENT")).content
    assert body == "likes tea\n"


def test_L4_providers_partition_every_read_by_the_scope_key(make_vault: Callable[..., memvault.Vault]) -> None:
    v = make_vault()
    v.retain(
        memvault.RetainRequest(
            workspace_id="w1",
            agent_id=scope_key("profile", None, "alice"),
            tier="AGENT",
            content="alice tea",
            mode="append",
        )
    )
    runtime = Runtime([slot("profile", v)], workspace_id="w1")
    alice = runtime.session("s1", principal="alice").turn_started(1, "tea")
    bob = runtime.session("s2", principal="bob").turn_started(1, "tea")
    assert [r.content for r in alice.records] == ["alice tea"]
    assert bob.records == ()


# -- L5 lock, same history, all-or-nothing -------------------------------------------


def test_L5_every_scope_is_resolved_before_any_recall_runs(make_vault: Callable[..., memvault.Vault]) -> None:
    events: list[str] = []

    def resolver(name: str) -> Callable[[ScopeContext], str]:
        def resolve(ctx: ScopeContext) -> str:
            events.append(f"resolve {name}")
            return "alice"

        return resolve

    def recall(ctx: LifecycleContext) -> None:
        events.append(f"recall {ctx.slot}")

    plugin = Scripted(turn_started=recall)
    v = make_vault(plugin)
    runtime = Runtime([slot("a", v, scope=resolver("a")), slot("b", v, scope=resolver("b"))])
    runtime.session("s").turn_started(1, "x")
    assert events == ["resolve a", "resolve b", "recall a", "recall b"]


def test_L5_every_recall_sees_the_same_pre_recall_history(make_vault: Callable[..., memvault.Vault]) -> None:
    plugin = Scripted(turn_started=lambda ctx: {"messages": [{"id": ctx.slot, "content": f"from {ctx.slot}"}]})
    v = make_vault(plugin)
    runtime = Runtime([slot("a", v), slot("b", v)])
    session = runtime.session("s", principal="alice")
    session.turn_started(1, "first")
    session.turn_completed(1, "answer")
    plugin.calls.clear()
    session.turn_started(2, "second")
    histories = [ctx.history for phase, ctx in plugin.calls if phase == "turn.started"]
    assert len(histories) == 2
    assert histories[0] == histories[1]
    assert Message(role="user", content="from a") in histories[1]  # last turn's records, not this turn's
    assert all(m.content != "second" for m in histories[0])


def test_L5_one_failing_recall_commits_none_and_fails_the_turn(make_vault: Callable[..., memvault.Vault]) -> None:
    good = make_vault(Scripted(turn_started=returns(("k", "fact A"))))
    bad = make_vault(Scripted(turn_started=raises))
    runtime = Runtime([slot("a", good), slot("b", bad)])
    session = runtime.session("s", principal="alice")
    with pytest.raises(TurnFailed) as info:
        session.turn_started(1, "hello")
    assert info.value.slot == "b"
    assert isinstance(info.value.__cause__, RuntimeError)
    assert session.entries() == []  # neither a's record nor the input: the model is never called


def test_L5_the_locked_scope_holds_for_the_turn_even_if_the_resolver_changes(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    who = {"scope": "alice"}
    v = make_vault()
    runtime = Runtime([slot("m", v, scope=lambda ctx: who["scope"])], workspace_id="w")
    session = runtime.session("s")
    start = session.turn_started(1, "")
    who["scope"] = "mallory"
    assert start.tools.call("m__write", {"tier": "AGENT", "content": "x", "mode": "replace"}).ok
    session.turn_completed(1, "done")
    assert session.locked_scopes["m"].scope == "alice"
    key = scope_key("m", None, "alice")
    assert v.read(memvault.ReadRequest(workspace_id="w", agent_id=key, tier="AGENT")).content == "x"


# -- L6 recall result validation --------------------------------------------------------

_INVALID_RESULTS: list[tuple[object, str]] = [
    ("just text", "None or"),
    (["x"], "None or"),
    ({"messages": "x"}, "list"),
    ({}, "list"),
    ({"messages": [], "extra": 1}, "unknown keys"),
    ({"messages": ["x"]}, "a message is"),
    ({"messages": [{"content": ""}]}, "non-blank"),
    ({"messages": [{"content": "  \n"}]}, "non-blank"),
    ({"messages": [{"content": 5}]}, "non-blank"),
    ({"messages": [{"content": "x", "role": "system"}]}, "unknown keys"),
    ({"messages": [{"content": "x", "id": ""}]}, "non-empty"),
    ({"messages": [{"content": "x", "id": 7}]}, "non-empty"),
    ({"messages": [{"content": "x", "id": "é" * 513}]}, "1024"),
    ({"messages": [{"content": "x", "id": "a"}, {"content": "y", "id": "a"}]}, "duplicate id"),
]


@pytest.mark.parametrize(("result", "rule"), _INVALID_RESULTS)
def test_L6_invalid_recall_results_fail_the_turn_naming_the_rule(
    result: object, rule: str, make_vault: Callable[..., memvault.Vault]
) -> None:
    runtime = Runtime([slot("a", make_vault(Scripted(turn_started=lambda ctx: result)))])
    session = runtime.session("s", principal="alice")
    with pytest.raises(TurnFailed, match="invalid result") as info:
        session.turn_started(1, "hi")
    assert isinstance(info.value.__cause__, memvault.InvalidRequest)
    assert rule in str(info.value.__cause__)
    assert "L6" in str(info.value.__cause__)
    assert session.entries() == []


@pytest.mark.parametrize(
    "result",
    [
        None,
        {"messages": []},
        {"messages": [{"content": "x"}, {"content": "x"}]},
        {"messages": [{"content": "x", "id": "i" * 1024}]},
        RecallOutcome(messages=[RecalledMessage(content="x", id="a")]),
    ],
)
def test_L6_valid_recall_results_are_accepted(result: object, make_vault: Callable[..., memvault.Vault]) -> None:
    runtime = Runtime([slot("a", make_vault(Scripted(turn_started=lambda ctx: result)))])
    runtime.session("s", principal="alice").turn_started(1, "hi")


# -- L7 records in history ---------------------------------------------------------------


def _session_with(make_vault: Callable[..., memvault.Vault], script: list[Any]) -> Any:
    results = iter(script)
    runtime = Runtime([slot("mem", make_vault(Scripted(turn_started=lambda ctx: next(results))))])
    return runtime.session("s", principal="alice")


def test_L7_same_id_same_content_is_a_no_op(make_vault: Callable[..., memvault.Vault]) -> None:
    msg = {"messages": [{"id": "k", "content": "v1"}]}
    session = _session_with(make_vault, [msg, msg])
    session.turn_started(1, "")
    session.turn_started(2, "")
    assert [e.content for e in session.entries() if e.kind == "record"] == ["v1"]


def test_L7_same_id_new_content_supersedes_only_the_latest_is_projected(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    session = _session_with(
        make_vault, [{"messages": [{"id": "k", "content": "v1"}]}, {"messages": [{"id": "k", "content": "v2"}]}]
    )
    session.turn_started(1, "")
    session.turn_started(2, "")
    assert [m.content for m in session.messages()] == ["v2"]
    assert [e.content for e in session.entries() if e.kind == "record"] == ["v1", "v2"]


def test_L7_messages_without_id_accumulate(make_vault: Callable[..., memvault.Vault]) -> None:
    msg = {"messages": [{"content": "same"}]}
    session = _session_with(make_vault, [msg, msg])
    session.turn_started(1, "")
    session.turn_started(2, "")
    assert [m.content for m in session.messages()] == ["same", "same"]


def test_L7_omitting_an_id_later_never_retracts_it(make_vault: Callable[..., memvault.Vault]) -> None:
    session = _session_with(make_vault, [{"messages": [{"id": "k", "content": "kept"}]}, {"messages": []}, None])
    for turn in (1, 2, 3):
        session.turn_started(turn, "")
    assert [m.content for m in session.messages()] == ["kept"]


def test_L7_ids_are_per_slot(make_vault: Callable[..., memvault.Vault]) -> None:
    v = make_vault(Scripted(turn_started=lambda ctx: {"messages": [{"id": "k", "content": f"{ctx.slot} value"}]}))
    session = Runtime([slot("a", v), slot("b", v)]).session("s", principal="alice")
    session.turn_started(1, "")
    assert [m.content for m in session.messages()] == ["a value", "b value"]


def test_L7_records_are_user_messages_attributed_to_their_slot_stripped_for_the_model(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    plugin = Scripted(turn_started=returns(("k", "Prefers metric units.")))
    session = Runtime([slot("profile", make_vault(plugin))]).session("s", principal="alice")
    session.turn_started(1, "units?")
    record = next(e for e in session.entries() if e.kind == "record")
    assert (record.role, record.slot, record.record_id) == ("user", "profile", "k")
    assert session.messages() == [
        Message(role="user", content="Prefers metric units."),
        Message(role="user", content="units?"),
    ]
    assert all(m.role != "system" for m in session.messages())
    plugin.calls.clear()
    session.turn_started(2, "again")
    seen = plugin.calls[0][1].history
    assert all(type(m) is Message for m in seen)
    assert not any(hasattr(m, "slot") for m in seen)


# -- L8 operation ids and replay ----------------------------------------------------------

_OP = re.compile(r"memop1_[A-Za-z0-9_-]{43}")


def test_L8_operation_ids_are_versioned_and_stable() -> None:
    op = operation_id("s1", 0, 3, "turn.started", "profile")
    assert _OP.fullmatch(op)
    assert op == operation_id("s1", 0, 3, "turn.started", "profile")


@pytest.mark.parametrize(
    "other",
    [
        ("s2", 0, 3, "turn.started", "profile"),
        ("s1", 1, 3, "turn.started", "profile"),
        ("s1", 0, 4, "turn.started", "profile"),
        ("s1", 0, None, "turn.started", "profile"),
        ("s1", 0, 3, "turn.completed", "profile"),
        ("s1", 0, 3, "turn.started", "notes"),
    ],
)
def test_L8_operation_ids_differ_by_session_sequence_turn_phase_and_slot(other: tuple[Any, ...]) -> None:
    assert operation_id("s1", 0, 3, "turn.started", "profile") != operation_id(*other)


def test_L8_hooks_receive_the_operation_id_of_their_phase(make_vault: Callable[..., memvault.Vault]) -> None:
    plugin = Scripted()
    session = Runtime([slot("a", make_vault(plugin))]).session("s1", principal="alice")
    session.turn_started(2, "x")
    session.turn_completed(2, "y")
    ops = {phase: ctx.operation_id for phase, ctx in plugin.calls}
    assert ops["turn.started"] == operation_id("s1", 0, 2, "turn.started", "a")
    assert ops["turn.completed"] == operation_id("s1", 0, 2, "turn.completed", "a")


def test_L8_replaying_turn_start_with_the_same_result_is_a_no_op(make_vault: Callable[..., memvault.Vault]) -> None:
    session = Runtime([slot("a", make_vault(Scripted(turn_started=returns((None, "fact")))))]).session(
        "s", principal="alice"
    )
    session.turn_started(1, "hello")
    before = session.entries()
    again = session.turn_started(1, "hello")
    assert again.replayed
    assert session.entries() == before


def test_L8_replaying_turn_start_with_a_different_result_is_an_error(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    results = iter([{"messages": [{"content": "first"}]}, {"messages": [{"content": "second"}]}])
    session = Runtime([slot("a", make_vault(Scripted(turn_started=lambda ctx: next(results))))]).session(
        "s", principal="alice"
    )
    session.turn_started(1, "hello")
    before = session.entries()
    with pytest.raises(ReplayConflict, match="L8"):
        session.turn_started(1, "hello")
    assert session.entries() == before


def test_L8_replaying_turn_completed_with_the_same_output_does_not_capture_twice(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    plugin = Scripted()
    session = Runtime([slot("a", make_vault(plugin))]).session("s", principal="alice")
    session.turn_started(1, "q")
    session.turn_completed(1, "answer")
    session.turn_completed(1, "answer")
    assert [p for p, _ in plugin.calls].count("turn.completed") == 1
    assert [m.content for m in session.messages()].count("answer") == 1
    with pytest.raises(ReplayConflict):
        session.turn_completed(1, "another answer")


# -- L9 compaction ------------------------------------------------------------------------


def test_L9_recalled_records_are_kept_out_of_the_summary(make_vault: Callable[..., memvault.Vault]) -> None:
    session = Runtime([slot("a", make_vault(Scripted(turn_started=returns(("k", "RECORD")))))]).session(
        "s", principal="alice"
    )
    session.turn_started(1, "question")
    session.turn_completed(1, "answer")
    plan = session.compaction_requested()
    assert [m.content for m in plan.messages] == ["question", "answer"]


def test_L9_latest_record_per_id_and_every_unkeyed_record_survive(make_vault: Callable[..., memvault.Vault]) -> None:
    script = iter(
        [
            {"messages": [{"id": "k", "content": "old"}, {"content": "loose 1"}]},
            {"messages": [{"id": "k", "content": "new"}, {"content": "loose 2"}]},
        ]
    )
    session = Runtime([slot("a", make_vault(Scripted(turn_started=lambda ctx: next(script))))]).session(
        "s", principal="alice"
    )
    for turn in (1, 2):
        session.turn_started(turn, f"q{turn}")
        session.turn_completed(turn, f"a{turn}")
    session.compact(lambda messages: "SUMMARY of " + ", ".join(m.content for m in messages))
    assert [(e.kind, e.content) for e in session.entries()] == [
        ("checkpoint", "SUMMARY of q1, a1, q2, a2"),
        ("record", "loose 1"),
        ("record", "new"),
        ("record", "loose 2"),
    ]


def test_L9_messages_added_during_compaction_are_kept_after_the_checkpoint(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    session = Runtime([slot("a", make_vault())]).session("s", principal="alice")
    session.add_message("user", "old")
    session.compaction_requested()
    session.add_message("user", "arrived meanwhile")
    session.compaction_completed("summary")
    assert [m.content for m in session.messages()] == ["summary", "arrived meanwhile"]


def test_L9_compaction_completed_recall_runs_against_the_new_checkpoint(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    plugin = Scripted(compaction_completed=returns(("k", "re-injected")))
    session = Runtime([slot("a", make_vault(plugin))]).session("s", principal="alice")
    session.turn_started(1, "q")
    session.turn_completed(1, "a")
    added = session.compact(lambda messages: "the summary")
    ctx = next(c for phase, c in plugin.calls if phase == "compaction.completed")
    assert ctx.history == (Message(role="user", content="the summary"),)
    assert [e.content for e in added] == ["re-injected"]
    assert session.epoch == 1


def test_L9_records_over_512_entries_are_canonicalised_without_compaction(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    counter = iter(range(10_000))
    session = Runtime(
        [slot("a", make_vault(Scripted(turn_started=lambda ctx: returns(("k", f"value {next(counter)}"))(ctx))))],
        compaction_threshold_tokens=10**9,
    ).session("s", principal="alice")
    most = 0
    for turn in range(MAX_RECORD_ENTRIES + 40):
        session.turn_started(turn, "")
        most = max(most, sum(1 for e in session.entries() if e.kind == "record"))
    assert most <= MAX_RECORD_ENTRIES
    assert not session.needs_compaction()
    assert [m.content for m in session.messages()] == [f"value {MAX_RECORD_ENTRIES + 39}"]


def test_L9_records_over_256_kib_are_canonicalised_without_compaction(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    big = iter(["a" * 100_000, "b" * 100_000, "c" * 100_000])
    session = Runtime(
        [slot("a", make_vault(Scripted(turn_started=lambda ctx: returns(("k", next(big)))(ctx))))]
    ).session("s", principal="alice")
    for turn in range(3):
        session.turn_started(turn, "")
    records = [e for e in session.entries() if e.kind == "record"]
    assert [r.content[0] for r in records] == ["c"]


# -- L10 failures ----------------------------------------------------------------------------


def test_L10_a_throwing_turn_start_recall_fails_the_turn(make_vault: Callable[..., memvault.Vault]) -> None:
    session = Runtime([slot("a", make_vault(Scripted(turn_started=raises)))]).session("s", principal="alice")
    with pytest.raises(TurnFailed) as info:
        session.turn_started(1, "hi")
    assert type(info.value) is TurnFailed
    assert info.value.phase == "turn.started"


def test_L10_a_failing_recall_of_a_cancelled_turn_is_a_cancellation(make_vault: Callable[..., memvault.Vault]) -> None:
    holder: dict[str, Any] = {}

    def cancel_then_fail(ctx: LifecycleContext) -> Any:
        holder["session"].cancel(ctx.turn)
        raise RuntimeError("interrupted")

    session = Runtime([slot("a", make_vault(Scripted(turn_started=cancel_then_fail)))]).session("s", principal="alice")
    holder["session"] = session
    with pytest.raises(TurnCancelled):
        session.turn_started(1, "hi")
    assert session.entries() == []


def test_L10_a_cancelled_turn_commits_nothing_even_when_recall_succeeds(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    session = Runtime([slot("a", make_vault(Scripted(turn_started=returns(("k", "x")))))]).session(
        "s", principal="alice"
    )
    session.cancel(1)
    with pytest.raises(TurnCancelled):
        session.turn_started(1, "hi")
    assert session.entries() == []


def test_L10_a_throwing_compaction_requested_capture_leaves_history_unchanged(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    session = Runtime(
        [slot("a", make_vault(Scripted(turn_started=returns(("k", "r")), compaction_requested=raises)))]
    ).session("s", principal="alice")
    session.turn_started(1, "q")
    session.turn_completed(1, "a")
    before = session.entries()
    with pytest.raises(CompactionFailed):
        session.compact(lambda messages: "summary")
    assert session.entries() == before
    assert session.epoch == 0
    with pytest.raises(memvault.InvalidRequest, match="compaction_requested"):
        session.compaction_completed("summary")  # the failed request left nothing pending


def test_L10_a_throwing_compaction_completed_recall_fails_an_automatic_turn(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    session = Runtime([slot("a", make_vault(Scripted(compaction_completed=raises)))]).session("s", principal="alice")
    session.turn_started(1, "q")
    with pytest.raises(TurnFailed) as info:
        session.compact(lambda messages: "summary", turn=1)
    assert info.value.phase == "compaction.completed"


def test_L10_a_throwing_compaction_completed_recall_only_logs_for_standalone_compaction(
    make_vault: Callable[..., memvault.Vault], caplog: pytest.LogCaptureFixture
) -> None:
    session = Runtime([slot("a", make_vault(Scripted(compaction_completed=raises)))]).session("s", principal="alice")
    session.turn_started(1, "q")
    session.turn_completed(1, "a")
    with caplog.at_level(logging.WARNING, logger="memvault.lifecycle"):
        assert session.compact(lambda messages: "summary") == ()
    assert "compaction.completed recall failed" in caplog.text
    assert [m.content for m in session.messages()] == ["summary"]


def test_L10_throwing_tools_are_logged_and_omitted_for_that_turn(
    make_vault: Callable[..., memvault.Vault], caplog: pytest.LogCaptureFixture
) -> None:
    runtime = Runtime([slot("broken", make_vault(Scripted(tools=raises))), slot("fine", make_vault())])
    with caplog.at_level(logging.WARNING, logger="memvault.lifecycle"):
        start = runtime.session("s", principal="alice").turn_started(1, "hi")
    assert "broken" in caplog.text
    assert start.tools.names == ["fine__read", "fine__write", "fine__search", "fine__append_daily"]


@pytest.mark.parametrize(
    "bad",
    [
        "not a list",
        ["not a tool"],
        [
            Tool(
                name="bad name",
                description="d",
                input_schema={"type": "object", "additionalProperties": False},
                handler=dict,
            )
        ],
        [Tool(name="open", description="d", input_schema={"type": "object"}, handler=dict)],
    ],
)
def test_L10_invalid_tools_are_logged_and_omitted_for_that_turn(
    bad: object, make_vault: Callable[..., memvault.Vault], caplog: pytest.LogCaptureFixture
) -> None:
    runtime = Runtime([slot("odd", make_vault(Scripted(tools=lambda ctx: bad)))])
    with caplog.at_level(logging.WARNING, logger="memvault.lifecycle"):
        start = runtime.session("s", principal="alice").turn_started(1, "hi")
    assert len(start.tools) == 0
    assert "odd" in caplog.text


def test_L10_a_throwing_turn_completed_capture_is_logged_and_the_turn_stands(
    make_vault: Callable[..., memvault.Vault], caplog: pytest.LogCaptureFixture
) -> None:
    session = Runtime([slot("a", make_vault(Scripted(turn_completed=raises)))]).session("s", principal="alice")
    session.turn_started(1, "q")
    with caplog.at_level(logging.WARNING, logger="memvault.lifecycle"):
        session.turn_completed(1, "the answer")
    assert "turn.completed capture failed" in caplog.text
    assert [m.content for m in session.messages()] == ["q", "the answer"]


# -- L11 clear ---------------------------------------------------------------------------------


def test_L11_clear_removes_history_records_locks_and_replay_bookkeeping_not_the_store(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    results = iter([{"messages": [{"content": "first"}]}, {"messages": [{"content": "second"}]}])
    v = make_vault(Scripted(turn_started=lambda ctx: next(results)))
    session = Runtime([slot("a", v)], workspace_id="w").session("s", principal="alice")
    start = session.turn_started(1, "q")
    assert start.tools.call("a__write", {"tier": "pins", "content": "keep me", "mode": "replace"}).ok
    session.clear()
    assert session.entries() == []
    assert session.locked_scopes == {}
    assert len(session.tools()) == 0
    session.turn_started(1, "q")  # a different result for the same operation id: no ReplayConflict after clear
    assert [m.content for m in session.messages()] == ["second", "q"]
    key = scope_key("a", None, "alice")
    assert v.read(memvault.ReadRequest(workspace_id="w", agent_id=key, tier="pins")).content == "keep me"


# -- the default lifecycle plugin, overridable per phase --------------------------------------


def test_default_recall_queries_the_input_inside_the_partition_with_label_line_ids(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    v = make_vault()
    key = scope_key("profile", None, "alice")
    v.retain(
        memvault.RetainRequest(
            workspace_id="w", agent_id=key, tier="AGENT", content="Likes tea.\nPrefers metric units.\n", mode="append"
        )
    )
    session = Runtime([slot("profile", v)], workspace_id="w").session("s", principal="alice")
    start = session.turn_started(1, "Which units do I prefer?")
    assert [(r.record_id, r.content) for r in start.records] == [("AGENT.md#2", "Prefers metric units.")]


def test_default_capture_into_daily_is_opt_in_per_slot(make_vault: Callable[..., memvault.Vault]) -> None:
    v = make_vault()
    runtime = Runtime([slot("off", v), slot("on", v, capture=True)], workspace_id="w")
    session = runtime.session("s", principal="alice")
    session.turn_started(1, "What is the capital of France?")
    session.turn_completed(1, "Paris.")

    def daily(name: str) -> str:
        return v.read(
            memvault.ReadRequest(workspace_id="w", agent_id=scope_key(name, None, "alice"), tier="daily")
        ).content

    assert daily("off") == ""
    assert re.fullmatch(
        r"- \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \u2014 user: What is the capital of France\? \| assistant: Paris\.\n",
        daily("on"),
    )


def test_a_provider_hook_overrides_the_default_memvault_recall_turn_started(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    from memvault.providers.memory import MemoryProvider

    class Provider(MemoryProvider):
        @memvault.hookimpl
        def memvault_recall_turn_started(self, ctx: LifecycleContext) -> RecallOutcome:
            return RecallOutcome(messages=[RecalledMessage(content=f"provider says hi to {ctx.slot}", id="p")])

    v = memvault.Vault(Provider(), name="own")
    try:
        start = Runtime([slot("m", v)]).session("s", principal="alice").turn_started(1, "hello")
    finally:
        v.close()
    assert [r.content for r in start.records] == ["provider says hi to m"]


def test_default_memvault_recall_compaction_completed_queries_the_checkpoint(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    v = make_vault()
    key = scope_key("m", None, "alice")
    v.retain(
        memvault.RetainRequest(
            workspace_id="w", agent_id=key, tier="pins", content="Project Falcon ships in May.\n", mode="append"
        )
    )
    session = Runtime([slot("m", v)], workspace_id="w").session("s", principal="alice")
    session.turn_started(1, "hello")
    added = session.compact(lambda messages: "We discussed project Falcon.")
    assert [(e.record_id, e.content) for e in added] == [("pins.md#1", "Project Falcon ships in May.")]


def test_default_memvault_capture_compaction_requested_and_memvault_tools_over_memory(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    v = make_vault()
    hook = v.plugin_manager.hook
    session = Runtime([slot("m", v)], workspace_id="w").session("s", principal="alice")
    start = session.turn_started(1, "hi")
    ctx = LifecycleContext(
        vault=v, slot="m", description="", scope_key=start.scopes["m"].scope_key, workspace_id="w",
        agent_id=start.scopes["m"].scope_key, session_id="s", phase="compaction.requested", operation_id="x",
    )  # fmt: skip
    assert hook.memvault_capture_compaction_requested(ctx=ctx) is None
    assert [t.name for t in hook.memvault_tools(ctx=ctx)] == ["read", "write", "search", "append_daily"]


# -- asyncio ----------------------------------------------------------------------------------


def test_async_session_methods_run_the_same_phases(make_vault: Callable[..., memvault.Vault]) -> None:
    import asyncio

    avault = memvault.AsyncVault(make_vault(Scripted(turn_started=returns(("k", "async fact")))))
    session = Runtime([slot("a", avault)]).session("s", principal="alice")

    async def loop() -> list[str]:
        await session.aturn_started(1, "q")
        await session.aturn_completed(1, "a")
        await session.acompaction_requested()
        await session.acompaction_completed("summary")
        return [m.content for m in session.messages()]

    assert asyncio.run(loop()) == ["summary", "async fact"]


def test_L8_replaying_compaction_completed_is_a_no_op_or_a_conflict(make_vault: Callable[..., memvault.Vault]) -> None:
    session = Runtime([slot("a", make_vault())]).session("s", principal="alice")
    session.turn_started(1, "q")
    session.compact(lambda messages: "summary one")
    before = session.entries()
    assert session.compaction_completed("summary one") == ()
    assert session.entries() == before
    with pytest.raises(ReplayConflict):
        session.compaction_completed("summary two")


def test_L8_the_sequence_is_the_compaction_epoch(make_vault: Callable[..., memvault.Vault]) -> None:
    plugin = Scripted()
    session = Runtime([slot("a", make_vault(plugin))]).session("s", principal="alice")
    session.turn_started(1, "q")
    session.compact(lambda messages: "summary")
    plugin.calls.clear()
    session.turn_started(2, "q")
    assert plugin.calls[0][1].operation_id == operation_id("s", 1, 2, "turn.started", "a")


def test_turn_completed_for_a_turn_that_was_not_started_is_invalid(make_vault: Callable[..., memvault.Vault]) -> None:
    session = Runtime([slot("a", make_vault())]).session("s", principal="alice")
    with pytest.raises(memvault.InvalidRequest, match="turn_started"):
        session.turn_completed(1, "answer")


def test_L10_a_turn_cancelled_from_another_thread_during_recall_commits_nothing(
    make_vault: Callable[..., memvault.Vault],
) -> None:
    import threading

    recall_running = threading.Event()
    release = threading.Event()

    def slow_recall(ctx: LifecycleContext) -> Any:
        recall_running.set()
        assert release.wait(5)
        return {"messages": [{"content": "late fact"}]}

    session = Runtime([slot("a", make_vault(Scripted(turn_started=slow_recall)))]).session("s", principal="alice")
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            session.turn_started(1, "hi")
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    assert recall_running.wait(5)
    canceller = threading.Thread(target=session.cancel, args=(1,))
    canceller.start()
    canceller.join(2)
    assert not canceller.is_alive()  # cancelling does not wait for the recall
    release.set()
    worker.join(5)
    assert len(outcome) == 1
    assert isinstance(outcome[0], TurnCancelled)
    assert session.entries() == []


@pytest.mark.parametrize(("option", "value"), [("kind", "graph"), ("recall_limit", 0), ("recall_limit", 21)])
def test_L1_slot_options_outside_their_range_are_invalid(
    option: str, value: object, make_vault: Callable[..., memvault.Vault]
) -> None:
    with pytest.raises(memvault.InvalidRequest, match=option):
        slot("a", make_vault(), **{option: value})
