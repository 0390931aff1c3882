"""retain_many: a list of retains, one outcome each, in order (P34).

The tests go through the public :meth:`memvault.Vault.retain_many`, so a provider
that implements the optional hook ``memvault_write_group`` is tested through its
group (up to 64 retains in one transaction) and one without it through one
commit per retain; both must give the same outcomes. The scanner's part (an
item it rejects fails alone) is in :mod:`memvault_parity.scanner`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any

import pytest

import memvault
from memvault.contract.models import Capability
from memvault_parity.base import SuiteBase, requires, retain_request

__all__ = ["REFUSED", "AfterEachRetain", "RetainManyTests", "item", "outcome_shape"]

#: Content the test's policy plugin refuses with ``InvalidRequest`` (an item that is invalid to the vault's hooks).
REFUSED = "REFUSED BY POLICY: "


#: One retain request, shaped like :meth:`SuiteBase.put`'s.
item = retain_request


def outcome_shape(outcome: object) -> tuple[Any, ...]:
    """What the contract fixes about an outcome: a result's id, bytes and warning, an error's class and fields."""
    if isinstance(outcome, memvault.RetainResult):
        return ("ok", outcome.id, outcome.bytes, outcome.warning)
    if isinstance(outcome, memvault.CapExceeded):
        return ("CapExceeded", outcome.tier, outcome.cap, outcome.projected, outcome.current)
    if isinstance(outcome, memvault.ContentRejected):
        return ("ContentRejected", outcome.category, outcome.pattern, outcome.sha256)
    if isinstance(outcome, memvault.InvalidRequest):
        return ("InvalidRequest", outcome.field)
    return (type(outcome).__name__, str(outcome))


def retain_one_by_one(vault: memvault.Vault, requests: Sequence[memvault.RetainRequest]) -> list[tuple[Any, ...]]:
    """The shapes of the outcomes that single retains give for ``requests``, in order."""
    shapes = []
    for request in requests:
        try:
            shapes.append(outcome_shape(vault.retain(request)))
        except memvault.MemvaultError as exc:
            shapes.append(outcome_shape(exc))
    return shapes


class _RefusesMarked:
    """A cross-cutting plugin that refuses, before the provider sees it, a retain whose content starts with
    :data:`REFUSED` (as a policy or authorisation plugin refuses a request)."""

    @memvault.hookimpl(wrapper=True)
    def memvault_retain(self, request: memvault.RetainRequest) -> Generator[None, Any, Any]:
        if request.content.startswith(REFUSED):
            raise memvault.InvalidRequest("refused by the test's policy plugin", field="content")
        return (yield)


class AfterEachRetain:
    """A cross-cutting plugin that calls ``action(n)`` after the n-th retain through it returns (1-based)."""

    def __init__(self, action: Callable[[int], None]) -> None:
        self.action = action
        self.count = 0

    @memvault.hookimpl(wrapper=True)
    def memvault_retain(self, request: memvault.RetainRequest) -> Generator[None, Any, Any]:
        result = yield
        self.count += 1
        self.action(self.count)
        return result


class RetainManyTests(SuiteBase):
    """Vault.retain_many over the provider, with or without its write group (P34)."""

    @pytest.fixture
    def policed(self, vault: memvault.Vault) -> memvault.Vault:
        """The vault under test plus a policy plugin that refuses items marked :data:`REFUSED`, on the same
        provider instance (the vault's other plugins, the scanner among them, are dropped)."""
        return memvault.Vault(
            vault.provider, name=vault.name, capabilities=vault.capabilities, plugins=[_RefusesMarked()]
        )

    def test_retain_many_gives_one_outcome_per_item_in_order(self, policed: memvault.Vault, ws: str) -> None:
        """P34/P9: appends land in order and each sees the ones before; an item over its cap gets CapExceeded
        (its current size counting the earlier items) and an item the hooks refuse gets InvalidRequest, each
        alone: the items after them go on, and the document holds exactly the successful appends, in order."""
        requests = [
            item(ws, "alpha;"),
            item(ws, "beta;"),
            item(ws, "x" * 3990),
            item(ws, "pinned;", tier="pins"),
            item(ws, REFUSED + "gamma;"),
            item(ws, "delta;"),
            item(ws, "y" * 3990, tier="pins", mode="replace"),
            item(ws, "epsilon;"),
        ]
        outcomes = policed.retain_many(requests)
        assert [outcome_shape(o) for o in outcomes] == [
            ("ok", "AGENT.md", 6, ""),
            ("ok", "AGENT.md", 11, ""),
            ("CapExceeded", "AGENT", 4000, 4001, 11),
            ("ok", "pins.md", 7, ""),
            ("InvalidRequest", "content"),
            ("ok", "AGENT.md", 17, ""),
            ("ok", "pins.md", 3990, ""),
            ("ok", "AGENT.md", 25, ""),
        ]
        assert self.body(policed, ws) == "alpha;beta;delta;epsilon;"
        assert self.body(policed, ws, tier="pins") == "y" * 3990
        assert self.find(policed, ws, "gamma") == []

    def test_retain_many_outcomes_equal_single_retains(self, vault: memvault.Vault) -> None:
        """P34/P9/P10: the same list through retain_many and through one retain each gives equal outcomes (ids,
        bytes, warnings, CapExceeded's fields) and equal documents: replaces, appends near and over the cap, every
        writable tier, a crew document and two agents."""

        def requests(ws: str) -> list[memvault.RetainRequest]:
            return [
                item(ws, "p" * 1000, tier="PERSONA", mode="replace"),
                item(ws, "q" * 250, tier="PERSONA"),
                item(ws, "r" * 300, tier="PERSONA"),
                item(ws, "s" * 200, tier="PERSONA"),
                item(ws, "short persona\n", tier="PERSONA", mode="replace"),
                item(ws, "crew note\n", tier="CREW"),
                item(ws, "c" * 3300, tier="CREW"),
                item(ws, "day one\n", tier="daily", key="2026-02-14"),
                item(ws, "peer ☃ note\n", tier="peers", key="carol"),
                item(ws, "é" * 700, tier="peers", key="carol"),
                item(ws, "pin\n", tier="pins"),
                item(ws, "agent two\n", agent="agent-2"),
                item(ws, "a" * 4000, agent="agent-2", mode="replace"),
                item(ws, "one too many", agent="agent-2"),
            ]

        many_ws, single_ws = self.new_workspace(), self.new_workspace()
        many = [outcome_shape(o) for o in vault.retain_many(requests(many_ws))]
        single = retain_one_by_one(vault, requests(single_ws))
        assert many == single
        assert [s[0] for s in many].count("CapExceeded") == 2
        for tier, key, agent in [
            ("PERSONA", "", "agent-1"),
            ("CREW", "", "agent-1"),
            ("daily", "2026-02-14", "agent-1"),
            ("peers", "carol", "agent-1"),
            ("pins", "", "agent-1"),
            ("AGENT", "", "agent-2"),
        ]:
            mine = self.body(vault, many_ws, tier=tier, key=key, agent=agent)
            assert mine == self.body(vault, single_ws, tier=tier, key=key, agent=agent), (tier, key, agent)

    def test_retain_many_stores_every_item_of_a_long_list_in_order(self, vault: memvault.Vault, ws: str) -> None:
        """P34/P9: 140 items (more than two write groups of 64) are all stored, in order, each result's bytes the
        body so far; items over their cap at the groups' edges (the 64th and the 65th) fail alone."""
        requests = [item(ws, f"<{k}>", tier="pins") for k in range(140)]
        requests[63] = requests[64] = item(ws, "z" * 1501, tier="PERSONA")
        outcomes = vault.retain_many(requests)
        assert len(outcomes) == 140
        body = ""
        for k, outcome in enumerate(outcomes):
            if k in (63, 64):
                assert outcome_shape(outcome) == ("CapExceeded", "PERSONA", 1500, 1501, 0), k
                continue
            body += f"<{k}>"
            assert outcome_shape(outcome) == ("ok", "pins.md", len(body), ""), k
        assert self.body(vault, ws, tier="pins") == body
        assert self.body(vault, ws, tier="PERSONA") == ""

    def test_retain_many_never_crosses_partitions(self, vault: memvault.Vault, ws: str) -> None:
        """P34/P3: one call writing the same label for two agents, look-alike agent ids, a crew and another
        workspace keeps each write in its own partition: each reads back only its own text, and recall in one
        partition finds nothing of the others."""
        other = self.new_workspace()
        owners = [
            (ws, "agent-1"),
            (ws, "agent-2"),
            (ws, "Agent-1"),
            (ws, "agent-10"),
            (other, "agent-1"),
        ]
        requests = []
        for round_ in range(2):
            requests += [item(w, f"{w}/{a} wombat{round_}\n", agent=a) for w, a in owners]
            requests.append(item(ws, f"crew wombat{round_}\n", tier="CREW"))
        outcomes = vault.retain_many(requests)
        assert all(isinstance(o, memvault.RetainResult) for o in outcomes), outcomes
        for w, a in owners:
            assert self.body(vault, w, agent=a) == f"{w}/{a} wombat0\n{w}/{a} wombat1\n", (w, a)
            hits = self.find(vault, w, "wombat0", agent=a)
            assert [(h.source, h.line) for h in hits] == [("AGENT.md", 1)], (w, a)
        assert self.body(vault, ws, tier="CREW") == "crew wombat0\ncrew wombat1\n"
        assert self.body(vault, other, tier="CREW") == ""

    def test_retain_many_a_failed_item_creates_no_document(self, vault: memvault.Vault, ws: str) -> None:
        """P34/P9/P23: an item over its cap as the first write to a new document, between successes, leaves no
        document: read is empty, forgetting it removes 0, and the listing (where there is one) holds only the
        documents the successes wrote."""
        outcomes = vault.retain_many(
            [
                item(ws, "before\n", tier="pins"),
                item(ws, "gannet " + "z" * 1500, tier="peers", key="nemo"),
                item(ws, "after\n", tier="pins"),
            ]
        )
        assert [outcome_shape(o)[0] for o in outcomes] == ["ok", "CapExceeded", "ok"]
        assert self.body(vault, ws, tier="peers", key="nemo") == ""
        assert self.find(vault, ws, "gannet") == []
        if Capability.LIST_DOCUMENTS in vault.capabilities:
            listed = vault.list_documents(memvault.ListDocumentsRequest(workspace_id=ws)).documents
            assert [d.label for d in listed] == ["pins.md"]
        assert self.drop(vault, ws, label="peers/nemo.md") == 0
        assert self.body(vault, ws, tier="pins") == "before\nafter\n"

    @requires(Capability.CASCADE_FORGET)
    def test_retain_many_tags_only_the_items_it_stores(self, vault: memvault.Vault, ws: str) -> None:
        """P34/P13: an item's data_subject_id tags its document (erasing the subject removes it, text and all),
        while an item that failed, on an existing document or a new one, tags nothing."""
        outcomes = vault.retain_many(
            [
                item(ws, "tagged pelican\n", subject="subject-1"),
                item(ws, "w" * 4000, subject="subject-2"),
                item(ws, "kept heron\n", tier="pins"),
                item(ws, "v" * 1501, tier="peers", key="nemo", subject="subject-3"),
                item(ws, "w" * 7990, tier="pins", subject="subject-2"),
                item(ws, "untagged ibis\n", tier="pins"),
            ]
        )
        kinds = [outcome_shape(o)[0] for o in outcomes]
        assert kinds == ["ok", "CapExceeded", "ok", "CapExceeded", "CapExceeded", "ok"], outcomes
        assert self.drop(vault, ws, subject="subject-2") == 0
        assert self.drop(vault, ws, subject="subject-3") == 0
        assert self.body(vault, ws, tier="pins") == "kept heron\nuntagged ibis\n"
        assert self.body(vault, ws) == "tagged pelican\n"
        assert self.drop(vault, ws, subject="subject-1") == 1
        assert self.body(vault, ws) == ""
        assert self.find(vault, ws, "pelican") == []
        assert self.body(vault, ws, tier="pins") == "kept heron\nuntagged ibis\n"

    @requires(Capability.DURABLE)
    def test_retain_many_successes_are_durable_when_it_returns(
        self, vault: memvault.Vault, ws: str, open_vault: Callable[[], memvault.Vault]
    ) -> None:
        """P34/P11: when retain_many returns, another vault opened on the same store (the first still open, so
        nothing was flushed at close) reads every success of a list longer than one write group, and no failure."""
        requests = [item(ws, f"<{k}>", tier="daily", key="2026-04-01") for k in range(70)]
        requests[40] = item(ws, "durable kestrel\n" + "z" * 1500, tier="PERSONA")
        outcomes = vault.retain_many(requests)
        assert outcome_shape(outcomes[40])[0] == "CapExceeded"
        other = open_vault()
        expected = "".join(f"<{k}>" for k in range(70) if k != 40)
        assert self.body(other, ws, tier="daily", key="2026-04-01") == expected
        assert self.body(other, ws, tier="PERSONA") == ""

    def test_retain_many_and_concurrent_retains_lose_nothing(self, vault: memvault.Vault, ws: str) -> None:
        """P34/P12: retains another thread makes while a retain_many runs (started after its 10th and 40th item;
        a provider's write group may hold them back until it commits) lose nothing and lose none of the list's
        items: the document holds every write once, whole, the list's in their order."""
        threads: list[threading.Thread] = []
        errors: list[BaseException] = []

        def concurrent(n: int) -> None:
            if n not in (10, 40):
                return

            def write() -> None:
                try:
                    self.put(vault, ws, f"<c{n}>", tier="pins")
                except BaseException as exc:  # noqa: BLE001 - asserted on below
                    errors.append(exc)
                finally:
                    done.set()

            done = threading.Event()
            thread = threading.Thread(target=write, daemon=True)
            threads.append(thread)
            thread.start()
            done.wait(0.05)  # long enough for a write nothing holds back; a group holding it back costs the wait

        watched = memvault.Vault(
            vault.provider, name=vault.name, capabilities=vault.capabilities, plugins=[AfterEachRetain(concurrent)]
        )
        outcomes = watched.retain_many([item(ws, f"<m{k}>", tier="pins") for k in range(50)])
        for thread in threads:
            thread.join(timeout=30)
        assert not any(t.is_alive() for t in threads), "P34: a retain made during retain_many never returned"
        assert errors == []
        assert all(isinstance(o, memvault.RetainResult) for o in outcomes), outcomes
        body = self.body(vault, ws, tier="pins")
        tokens = re.findall(r"<([cm]\d+)>", body)
        assert re.sub(r"<[cm]\d+>", "", body) == "", "P12: a write was torn"
        assert sorted(tokens) == sorted([f"m{k}" for k in range(50)] + ["c10", "c40"])
        assert [t for t in tokens if t.startswith("m")] == [f"m{k}" for k in range(50)]
