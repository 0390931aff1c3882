"""Partitions never leak (contract P2, P3, P16)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

import memvault
from memvault_parity.base import SuiteBase

__all__ = ["PartitionTests"]

_AGENT_TIERS = [("AGENT", ""), ("PERSONA", ""), ("pins", ""), ("daily", "2026-09-09"), ("peers", "iris")]
_LABELS = {
    "AGENT": "AGENT.md",
    "PERSONA": "PERSONA.md",
    "pins": "pins.md",
    "daily": "daily/2026-09-09.md",
    "peers": "peers/iris.md",
    "lessons": "lessons.md",
    "CREW": "CREW.md",
}

# Pairs of document addresses that must stay apart. "ws" is a suffix added to the test's
# workspace; "agent"/"crew"/"key" are the ids. Each pair differs only in case, by a prefix, or
# by where a ':', '@', '.' or '-' falls between two ids joined into one storage key.
_LOOK_ALIKES: list[tuple[dict[str, str], dict[str, str]]] = [
    ({"ws": "-q"}, {"ws": "-Q"}),
    ({"agent": "agent-a"}, {"agent": "Agent-A"}),
    ({"crew": "crew-a"}, {"crew": "CREW-A"}),
    ({"key": "bob"}, {"key": "Bob"}),
    ({"ws": ""}, {"ws": "0"}),
    ({"agent": "agent-1"}, {"agent": "agent-10"}),
    ({"crew": "crew-1"}, {"crew": "crew-10"}),
    ({"key": "bob"}, {"key": "bob0"}),
    ({"ws": ":x", "agent": "y"}, {"ws": "", "agent": "x:y"}),
    ({"ws": "@x", "agent": "y"}, {"ws": "", "agent": "x@y"}),
    ({"ws": ".x", "agent": "y"}, {"ws": "", "agent": "x.y"}),
    ({"ws": "-x", "agent": "y"}, {"ws": "", "agent": "x-y"}),
    ({"ws": ":x", "crew": "y"}, {"ws": "", "crew": "x:y"}),
    ({"agent": "a:b", "key": "c"}, {"agent": "a", "key": "b:c"}),
    ({"agent": "a.b", "key": "c"}, {"agent": "a", "key": "b.c"}),
]
_LOOK_ALIKE_IDS = [
    "case-workspace",
    "case-agent",
    "case-crew",
    "case-peer-key",
    "prefix-workspace",
    "prefix-agent",
    "prefix-crew",
    "prefix-peer-key",
    "colon-workspace-agent",
    "at-workspace-agent",
    "dot-workspace-agent",
    "dash-workspace-agent",
    "colon-workspace-crew",
    "colon-agent-key",
    "dot-agent-key",
]


def _address(ws: str, spec: dict[str, str]) -> dict[str, Any]:
    """Where a look-alike case writes: its workspace, the retain/read keyword args, the recall/forget ones."""
    if "crew" in spec:
        at = {"tier": "CREW", "agent": "", "crew": spec["crew"]}
        who = {"agent": "", "crew": spec["crew"]}
    elif "key" in spec:
        at = {"tier": "peers", "agent": spec.get("agent", "agent-1"), "key": spec["key"]}
        who = {"agent": spec.get("agent", "agent-1")}
    else:
        at = {"tier": "AGENT", "agent": spec.get("agent", "agent-1")}
        who = {"agent": spec.get("agent", "agent-1")}
    return {"ws": ws + spec.get("ws", ""), "at": at, "who": who}


_BAD_IDENTIFIERS = ["a/b", "a\\b", "..", "x..y", "a\x00b", "tab\tid", ".hidden", "x" * 129, "sp ace"]


class PartitionTests(SuiteBase):
    """Nothing crosses a workspace, an agent or a crew (P3); who reads what (P16)."""

    def test_recall_never_returns_another_workspaces_lines(self, vault: memvault.Vault) -> None:
        """P3: a line retained in one workspace is invisible from another."""
        mine, theirs = self.new_workspace(), self.new_workspace()
        self.put(vault, theirs, "Their secret is pomegranate.\n")
        self.put(vault, mine, "My note mentions nothing special.\n")
        assert self.find(vault, mine, "pomegranate") == []

    def test_recall_never_returns_another_agents_lines(self, vault: memvault.Vault, ws: str) -> None:
        """P3: agent tiers are private to their agent within a workspace."""
        self.put(vault, ws, "Agent two prefers rhubarb.\n", agent="agent-2")
        self.put(vault, ws, "Agent one prefers apples.\n", agent="agent-1")
        hits = self.find(vault, ws, "rhubarb", agent="agent-1")
        assert hits == []

    def test_recall_never_returns_another_crews_lines(self, vault: memvault.Vault, ws: str) -> None:
        """P3: CREW documents are private to their crew."""
        self.put(vault, ws, "Crew two meets on quayside.\n", tier="CREW", crew="crew-2")
        assert self.find(vault, ws, "quayside", agent="", crew="crew-1") == []
        assert len(self.find(vault, ws, "quayside", agent="", crew="crew-2")) == 1

    def test_read_never_returns_another_workspaces_document(self, vault: memvault.Vault) -> None:
        """P3: read in another workspace sees an empty document."""
        mine, theirs = self.new_workspace(), self.new_workspace()
        self.put(vault, theirs, "private body\n")
        assert self.body(vault, mine) == ""

    def test_read_never_returns_another_agents_document(self, vault: memvault.Vault, ws: str) -> None:
        """P3: read of another agent's AGENT.md is empty."""
        self.put(vault, ws, "agent two body\n", agent="agent-2")
        assert self.body(vault, ws, agent="agent-1") == ""

    def test_forget_never_removes_another_workspaces_document(self, vault: memvault.Vault) -> None:
        """P3: forget by id removes only the caller's document."""
        mine, theirs = self.new_workspace(), self.new_workspace()
        self.put(vault, theirs, "keep me please\n")
        assert self.drop(vault, mine, label="AGENT.md") == 0
        assert self.body(vault, theirs) == "keep me please\n"

    def test_forget_never_removes_another_agents_document(self, vault: memvault.Vault, ws: str) -> None:
        """P3: forget counts and deletes only the caller's agent's document."""
        self.put(vault, ws, "agent two keeps this\n", agent="agent-2")
        assert self.drop(vault, ws, label="AGENT.md", agent="agent-1") == 0
        assert self.body(vault, ws, agent="agent-2") == "agent two keeps this\n"

    def test_same_label_in_two_workspaces_is_two_documents(self, vault: memvault.Vault) -> None:
        """P3: appends to AGENT.md in one workspace do not change the other's body or size."""
        one, two = self.new_workspace(), self.new_workspace()
        self.put(vault, one, "first ")
        result = self.put(vault, two, "second")
        assert result.bytes == len(b"second")
        assert self.body(vault, one) == "first "
        assert self.body(vault, two) == "second"

    @pytest.mark.parametrize("bad", _BAD_IDENTIFIERS, ids=repr)
    def test_unsafe_identifiers_are_invalid_and_write_nothing(self, vault: memvault.Vault, ws: str, bad: str) -> None:
        """P3: path separators, '..', NUL, control characters, leading '.', over 128 chars: InvalidRequest."""
        with pytest.raises(memvault.InvalidRequest):
            self.put(vault, ws, "must not be stored zanzibar\n", agent=bad)
        with pytest.raises(memvault.InvalidRequest):
            self.put(vault, bad, "must not be stored zanzibar\n")
        assert self.find(vault, ws, "zanzibar") == []

    def test_workspace_id_is_required_on_every_verb(self) -> None:
        """P2: an empty workspace_id is InvalidRequest for retain, recall, read and forget."""
        with pytest.raises(memvault.InvalidRequest):
            memvault.RetainRequest(workspace_id="", agent_id="a", tier="AGENT", content="x", mode="append")
        with pytest.raises(memvault.InvalidRequest):
            memvault.RecallRequest(workspace_id="", agent_id="a", query="x")
        with pytest.raises(memvault.InvalidRequest):
            memvault.ReadRequest(workspace_id="", agent_id="a", tier="AGENT")
        with pytest.raises(memvault.InvalidRequest):
            memvault.ForgetRequest(workspace_id="", agent_id="a", id="AGENT.md")

    def test_agent_tiers_require_agent_id(self, vault: memvault.Vault, ws: str) -> None:
        """P2: retain to an agent tier without agent_id is InvalidRequest."""
        with pytest.raises(memvault.InvalidRequest):
            self.put(vault, ws, "x", agent="")

    def test_crew_tier_requires_crew_id(self, vault: memvault.Vault, ws: str) -> None:
        """P2: retain to CREW without crew_id is InvalidRequest."""
        with pytest.raises(memvault.InvalidRequest):
            vault.retain(
                memvault.RetainRequest(workspace_id=ws, agent_id="agent-1", tier="CREW", content="x", mode="append")
            )

    def test_crew_document_is_shared_by_every_agent_of_the_crew(self, vault: memvault.Vault, ws: str) -> None:
        """P2/P16: CREW is keyed by crew_id, so another agent of the crew recalls it."""
        self.put(vault, ws, "Standup at nine sharp.\n", tier="CREW", crew="crew-1", agent="agent-1")
        hits = self.find(vault, ws, "standup", agent="agent-2", crew="crew-1")
        assert [(h.source, h.line) for h in hits] == [("CREW.md", 1)]

    def test_recall_without_tier_searches_every_agent_tier(self, vault: memvault.Vault, ws: str) -> None:
        """P16: an empty tier searches AGENT, PERSONA, pins, daily and peers of the agent."""
        self.put(vault, ws, "walrus in agent\n", tier="AGENT")
        self.put(vault, ws, "walrus in persona\n", tier="PERSONA")
        self.put(vault, ws, "walrus in pins\n", tier="pins")
        self.put(vault, ws, "walrus in daily\n", tier="daily", key="2026-01-31")
        self.put(vault, ws, "walrus in peers\n", tier="peers", key="bob")
        sources = {h.source for h in self.find(vault, ws, "walrus")}
        assert sources == {"AGENT.md", "PERSONA.md", "pins.md", "daily/2026-01-31.md", "peers/bob.md"}

    def test_recall_without_tier_adds_crew_only_when_crew_id_is_given(self, vault: memvault.Vault, ws: str) -> None:
        """P16: CREW of crew_id is searched when crew_id is given, not otherwise."""
        self.put(vault, ws, "narwhal agent line\n")
        self.put(vault, ws, "narwhal crew line\n", tier="CREW", crew="crew-1")
        assert {h.source for h in self.find(vault, ws, "narwhal")} == {"AGENT.md"}
        assert {h.source for h in self.find(vault, ws, "narwhal", crew="crew-1")} == {"AGENT.md", "CREW.md"}

    def test_recall_with_only_a_crew_id_searches_only_the_crew(self, vault: memvault.Vault, ws: str) -> None:
        """P16: without agent_id, no agent tier is searched, whoever wrote it."""
        self.put(vault, ws, "heron agent line\n", agent="agent-1")
        self.put(vault, ws, "heron crew line\n", tier="CREW", crew="crew-1", agent="agent-1")
        assert [h.source for h in self.find(vault, ws, "heron", agent="", crew="crew-1")] == ["CREW.md"]

    def test_recall_with_a_tier_searches_only_that_tier(self, vault: memvault.Vault, ws: str) -> None:
        """P16: a named tier limits the search to it."""
        self.put(vault, ws, "ocelot in agent\n", tier="AGENT")
        self.put(vault, ws, "ocelot in pins\n", tier="pins")
        assert {h.source for h in self.find(vault, ws, "ocelot", tier="pins")} == {"pins.md"}

    @hsettings(
        max_examples=12,
        deadline=None,
        database=None,  # leave no .hypothesis folder in a plugin author's working directory
        # differing_executors: the suite's test runs on many subclasses (one per provider, and the
        # classes `memvault parity` builds) in one process, by design.
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.differing_executors,
        ],
    )
    @given(
        ops=st.lists(
            st.tuples(
                st.sampled_from(["retain", "append", "forget", "recall", "read"]),
                st.integers(0, 1),  # workspace
                st.sampled_from([("agent", 0), ("agent", 1), ("crew", 0), ("crew", 1)]),
                st.integers(0, 99),
            ),
            min_size=1,
            max_size=14,
        )
    )
    def test_interleaved_operations_never_cross_partitions(
        self, vault: memvault.Vault, ops: list[tuple[str, int, tuple[str, int], int]]
    ) -> None:
        """P3: any interleaving of retain/recall/read/forget over 2 workspaces x 2 agents x 2 crews
        keeps every partition's view equal to its own history, and no hit ever carries another's tag."""
        run = uuid.uuid4().hex[:8]
        workspaces = [f"parity-{run}-w0", f"parity-{run}-w1"]
        model: dict[tuple[int, str, int], str] = {}

        def tag(w: int, kind: str, owner: int) -> str:
            return f"tag{w}{kind[0]}{owner}"

        def partition(w: int, kind: str, owner: int) -> dict[str, Any]:
            if kind == "agent":
                return {"agent": f"agent-{owner}", "tier": "AGENT"}
            return {"agent": "", "crew": f"crew-{owner}", "tier": "CREW"}

        for verb, w, (kind, owner), n in ops:
            where = partition(w, kind, owner)
            key = (w, kind, owner)
            line = f"shared {tag(w, kind, owner)} n{n}\n"
            ws = workspaces[w]
            if verb in ("retain", "append"):
                mode = "replace" if verb == "retain" else "append"
                args = {k: v for k, v in where.items() if k != "agent" or v}
                self.put(vault, ws, line, mode=mode, **args)
                model[key] = line if mode == "replace" else model.get(key, "") + line
            elif verb == "forget":
                label = "AGENT.md" if kind == "agent" else "CREW.md"
                removed = self.drop(vault, ws, label=label, agent=where["agent"], crew=where.get("crew", ""))
                assert removed == (1 if key in model else 0)
                model.pop(key, None)
            elif verb == "read":
                args = {k: v for k, v in where.items()}
                assert self.body(vault, ws, **args) == model.get(key, "")
            else:
                hits = self.find(
                    vault, ws, "shared", agent=where["agent"], crew=where.get("crew", ""), tier=where["tier"]
                )
                expected_lines = model.get(key, "").count("\n")
                assert len(hits) == min(expected_lines, 20)
                for hit in hits:
                    assert tag(w, kind, owner) in hit.snippet, f"P3: hit {hit} crossed into {key}"

    # -- identifiers that look alike (P3) --------------------------------------

    @pytest.mark.parametrize(("here", "there"), _LOOK_ALIKES, ids=_LOOK_ALIKE_IDS)
    def test_look_alike_identifiers_never_share_a_document(
        self, vault: memvault.Vault, ws: str, here: dict[str, str], there: dict[str, str]
    ) -> None:
        """P3/P4: identifiers are compared exactly: ids differing only in case, an id that is a prefix of
        another (`agent-1`, `agent-10`), and ids whose `:`/`@`/`.`/`-` would join into the same storage key
        are different owners: neither reads, recalls, counts nor forgets the other's document."""
        mine, theirs = _address(ws, here), _address(ws, there)
        self.put(vault, theirs["ws"], "their line quetzal\n", **theirs["at"])
        result = self.put(vault, mine["ws"], "my line\n", **mine["at"])
        assert result.bytes == len(b"my line\n")
        assert self.body(vault, mine["ws"], **mine["at"]) == "my line\n"
        leaked = [h.source for h in self.find(vault, mine["ws"], "quetzal", **mine["who"])]
        assert result.id not in leaked
        if mine["who"] != theirs["who"] or mine["ws"] != theirs["ws"]:
            assert leaked == []
        assert self.drop(vault, mine["ws"], label=result.id, **mine["who"]) == 1
        assert self.drop(vault, mine["ws"], label=result.id, **mine["who"]) == 0
        assert self.body(vault, theirs["ws"], **theirs["at"]) == "their line quetzal\n"
        assert len(self.find(vault, theirs["ws"], "quetzal", **theirs["who"])) == 1

    # -- every agent tier is the agent's (P2, P3, P16) -------------------------

    @pytest.mark.parametrize(("tier", "key"), _AGENT_TIERS)
    def test_every_agent_tier_is_private_to_its_agent(
        self, vault: memvault.Vault, ws: str, tier: str, key: str
    ) -> None:
        """P3: AGENT, PERSONA, pins, daily and peers are each one document per agent: another agent's
        document of the same tier and key is neither read, recalled, sized, nor forgotten."""
        label = _LABELS[tier]
        self.put(vault, ws, "other agent quokka\n", tier=tier, key=key, agent="agent-2")
        mine = self.put(vault, ws, "my own line\n", tier=tier, key=key, agent="agent-1")
        assert mine.bytes == len(b"my own line\n")
        assert self.body(vault, ws, tier=tier, key=key) == "my own line\n"
        assert self.find(vault, ws, "quokka") == []
        assert self.find(vault, ws, "quokka", tier=tier) == []
        assert self.drop(vault, ws, label=label) == 1
        assert self.drop(vault, ws, label=label) == 0
        assert self.body(vault, ws, tier=tier, key=key, agent="agent-2") == "other agent quokka\n"

    @pytest.mark.parametrize(("tier", "key"), _AGENT_TIERS)
    def test_an_agent_tier_written_with_a_crew_id_stays_the_agents(
        self, vault: memvault.Vault, ws: str, tier: str, key: str
    ) -> None:
        """P2/P3: an agent tier belongs to agent_id even when crew_id is passed too: the agent reads it
        without the crew, and the crew's other agents (or the crew alone) never read, recall or forget it."""
        label = _LABELS[tier]
        self.put(vault, ws, "crewmate wombat\n", tier=tier, key=key, agent="agent-1", crew="crew-1")
        assert self.body(vault, ws, tier=tier, key=key, agent="agent-1") == "crewmate wombat\n"
        assert self.body(vault, ws, tier=tier, key=key, agent="agent-2", crew="crew-1") == ""
        assert self.find(vault, ws, "wombat", agent="agent-2", crew="crew-1") == []
        assert self.find(vault, ws, "wombat", agent="", crew="crew-1") == []
        assert [h.source for h in self.find(vault, ws, "wombat", agent="agent-1")] == [label]
        assert self.drop(vault, ws, label=label, agent="agent-2", crew="crew-1") == 0
        assert self.drop(vault, ws, label=label, agent="agent-1", crew="crew-1") == 1
        assert self.body(vault, ws, tier=tier, key=key, agent="agent-1") == ""

    @pytest.mark.parametrize("tier", ["AGENT", "PERSONA", "pins", "daily", "peers", "lessons", "CREW"])
    def test_a_named_tier_with_both_ids_searches_only_that_tier(
        self, vault: memvault.Vault, ws: str, tier: str
    ) -> None:
        """P16: recall with a named tier and both agent_id and crew_id searches that tier only: an agent
        tier never adds CREW.md, CREW never adds the agent's documents."""
        for name, key in (*_AGENT_TIERS, ("CREW", "")):
            self.put(vault, ws, f"puffin in {name}\n", tier=name, key=key, crew="crew-1")
        sources = {h.source for h in self.find(vault, ws, "puffin", crew="crew-1", tier=tier)}
        assert sources == ({_LABELS[tier]} if tier != "lessons" else set())
