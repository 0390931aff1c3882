"""A vault used across ``os.fork()`` (P35).

Agent builders open a vault at import time and then fork: multiprocessing's default start
method on Linux before Python 3.14, gunicorn's ``--preload``, Celery's prefork pool. A fork
copies everything the provider holds: sockets whose other end is one server session, lock
tables of a database library, locks held by threads the child does not have. Each test
forks this test process (``os.fork``), runs the child's part and ends the child with
``os._exit``; the child's outcome comes back through a pipe.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable

import pytest

import memvault
from memvault.contract.models import Capability
from memvault_parity.base import SuiteBase, requires

__all__ = ["ForkTests", "ForkedChild"]

#: How long a child may take before the test calls it stalled.
_CHILD_DEADLINE = 10.0

_needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="the platform has no os.fork")
_quiet = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")


class ForkedChild:
    """A forked child running ``work``; :meth:`outcome` is ``"ok"`` or what it raised."""

    def __init__(self, work: Callable[[], None]) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, which never returns from here
            os.close(read)
            try:
                work()
                message = b"ok"
            except BaseException:  # noqa: BLE001 - every failure goes to the parent
                message = traceback.format_exc().encode("utf-8", "replace")[-4000:]
            os.write(write, message)
            os._exit(0)
        os.close(write)
        self.pid, self._read = pid, read

    def outcome(self, deadline: float = _CHILD_DEADLINE) -> str:
        until = time.monotonic() + deadline
        while os.waitpid(self.pid, os.WNOHANG)[0] == 0:
            if time.monotonic() > until:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
                os.close(self._read)
                return f"the child was still running after {deadline:g} s (stalled)"
            time.sleep(0.01)
        with os.fdopen(self._read, "rb") as pipe:
            return pipe.read().decode("utf-8", "replace") or "the child died without a word"


def _owners(hits: list[memvault.RecallSnippet]) -> set[str]:
    """The first word of each hit: the tests' lines start with their owner's name."""
    return {hit.snippet.split()[0] for hit in hits}


@_needs_fork
@_quiet
class ForkTests(SuiteBase):
    """P35: a vault opened before a fork serves the parent and the child, each its own calls."""

    def test_after_a_fork_each_process_gets_its_own_answers(self, vault: memvault.Vault, ws: str) -> None:
        """P35: parent and child recall at once through one vault opened before the fork, while
        other threads of the parent write: each answer is to its own question, and nothing stalls."""
        for owner in ("parent", "child"):
            for i in range(3):
                self.put(vault, ws, f"{owner} keeps heron {i}\n", agent=f"agent-{owner}")
        assert _owners(self.find(vault, ws, "heron", agent="agent-parent")) == {"parent"}
        stop = threading.Event()
        failures: list[BaseException] = []

        def keep_writing(n: int) -> None:
            # Three writers of 7 KB bodies (pins' cap is 8,000): the provider's write path is almost
            # always busy, so each fork finds a writer inside it (holding its locks, its connection).
            i = 0
            try:
                while not stop.is_set():
                    body = "".join(f"writer line {i} number {k:03d}\n" for k in range(250))
                    self.put(vault, ws, body, agent=f"agent-writer-{n}", tier="pins", mode="replace")
                    i += 1
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                failures.append(exc)

        def child() -> None:
            self.put(vault, ws, "child wrote osprey\n", agent="agent-child")
            for _ in range(10):
                owners = _owners(self.find(vault, ws, "heron", agent="agent-child"))
                assert owners == {"child"}, f"P35: the child's recall answered with {sorted(owners)}'s lines"
            assert _owners(self.find(vault, ws, "osprey", agent="agent-child")) == {"child"}

        writers = [threading.Thread(target=keep_writing, args=(n,)) for n in range(3)]
        for writer in writers:
            writer.start()
        outcomes = []
        try:
            time.sleep(0.05)
            for _ in range(2):
                forked = ForkedChild(child)
                try:
                    for _ in range(10):
                        owners = _owners(self.find(vault, ws, "heron", agent="agent-parent"))
                        assert owners == {"parent"}, f"P35: the parent's recall answered with {sorted(owners)}'s lines"
                finally:
                    outcomes.append(forked.outcome())
                if outcomes[-1] != "ok":
                    break
        finally:
            stop.set()
            for writer in writers:
                writer.join()
        assert outcomes == ["ok"] * 2, f"P35: in a child: {outcomes[-1]}"
        assert failures == [], f"P35: a writer thread of the parent failed: {failures[0]!r}"
        self.put(vault, ws, "parent still writes\n", agent="agent-parent")
        assert _owners(self.find(vault, ws, "still writes", agent="agent-parent")) == {"parent"}

    def test_closing_the_vault_in_a_child_leaves_the_parent_working(self, vault: memvault.Vault, ws: str) -> None:
        """P35: a child that uses the inherited vault and closes it (a worker finishing) takes nothing
        of the parent's with it: the parent's next calls answer as before."""
        self.put(vault, ws, "parent line about kestrels\n", agent="agent-parent")
        assert len(self.find(vault, ws, "kestrels", agent="agent-parent")) == 1

        def child() -> None:
            self.put(vault, ws, "child line about kestrels\n", agent="agent-child")
            assert len(self.find(vault, ws, "kestrels", agent="agent-child")) == 1
            vault.close()

        outcome = ForkedChild(child).outcome()
        assert outcome == "ok", f"P35: in the child: {outcome}"
        for i in range(3):
            self.put(vault, ws, f"parent line {i} after the child closed\n", agent="agent-parent")
            hits = self.find(vault, ws, f"parent line {i} after", agent="agent-parent")
            assert [h.snippet for h in hits][:1] == [f"parent line {i} after the child closed"]

    def test_a_child_that_lives_on_holds_up_none_of_the_parents_writes(self, vault: memvault.Vault, ws: str) -> None:
        """P35: a child forked while the parent's threads write one document (so at the fork one of them
        holds its lock), and that then lives on without touching the vault (a pool's idle worker): the
        parent's writes to that document go on."""
        stop = threading.Event()
        done = [0, 0, 0]
        failures: list[BaseException] = []

        def keep_appending(n: int) -> None:
            try:
                while not stop.is_set():
                    self.put(vault, ws, f"<w{n}-{done[n]}>", agent="agent-parent", tier="daily", key="2024-02-02")
                    done[n] += 1
                    if done[n] % 200 == 0:  # stay under daily's cap
                        self.put(vault, ws, "-", agent="agent-parent", tier="daily", key="2024-02-02", mode="replace")
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                failures.append(exc)

        writers = [threading.Thread(target=keep_appending, args=(n,)) for n in range(3)]
        for writer in writers:
            writer.start()
        try:
            time.sleep(0.05)
            forked = ForkedChild(lambda: time.sleep(1.5))
            time.sleep(0.05)
            before = sum(done)
            time.sleep(0.5)
            during = sum(done) - before
            outcome = forked.outcome()
        finally:
            stop.set()
            for writer in writers:
                writer.join()
        assert outcome == "ok", f"P35: in the child: {outcome}"
        assert failures == [], f"P35: a writer thread of the parent failed: {failures[0]!r}"
        assert during > 0, "P35: the parent's writers stood still while a forked child lived"

    @requires(Capability.MULTI_PROCESS)
    def test_a_childs_retains_survive_the_parent_closing_its_vault(
        self, vault: memvault.Vault, ws: str, open_vault: Callable[[], memvault.Vault]
    ) -> None:
        """P35: while a child writes through the vault it inherited, the parent closes its own
        (a pool's parent shutting down): every retain the child was acknowledged is stored."""
        self.put(vault, ws, "parent opened the store\n", agent="agent-parent")
        self.find(vault, ws, "opened", agent="agent-parent")
        written = 40

        def child() -> None:
            for i in range(written):
                self.put(vault, ws, f"<c{i}>", agent="agent-child", tier="pins")
                time.sleep(0.005)

        forked = ForkedChild(child)
        time.sleep(0.08)
        vault.close()
        outcome = forked.outcome()
        assert outcome == "ok", f"P35: in the child: {outcome}"
        body = self.body(open_vault(), ws, tier="pins", agent="agent-child")
        assert body == "".join(f"<c{i}>" for i in range(written)), (
            f"P35: {written - body.count('<c')} of the child's {written} acknowledged retains were lost"
        )
