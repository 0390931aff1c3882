"""``memvault.after_fork_in_child``: resets that run in a forked child (contract P35)."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import memvault

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]


class _Owner:
    def __init__(self, name: str) -> None:
        self.name = name
        self.resets = 0
        self.lock = threading.Lock()

    def reset(self) -> None:
        self.resets += 1
        self.lock = threading.Lock()


class _Fails:
    def reset(self) -> None:
        raise RuntimeError("this reset fails")


def _in_child(report: object) -> str:
    """Fork; the child writes ``report()`` to a pipe and exits; the parent returns what it wrote."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write, str(report()).encode())  # type: ignore[operator]
        finally:
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 10
    while os.waitpid(pid, os.WNOHANG)[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            os.close(read)
            return "stalled"
        time.sleep(0.01)
    with os.fdopen(read, "rb") as fh:
        return fh.read().decode()


@contextlib.contextmanager
def _held_by_another_thread(lock: Any) -> Iterator[None]:
    """``lock`` held by another thread of this process for the ``with`` block."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(10)
        yield
    finally:
        release.set()
        thread.join()


def test_a_reset_runs_in_the_child_and_not_in_the_parent() -> None:
    owner = _Owner("a")
    memvault.after_fork_in_child(owner, _Owner.reset)
    assert _in_child(lambda: owner.resets) == "1"
    assert owner.resets == 0


def test_a_lock_held_by_another_thread_at_the_fork_is_free_in_the_child() -> None:
    owner = _Owner("b")
    memvault.after_fork_in_child(owner, _Owner.reset)
    with _held_by_another_thread(owner.lock):
        assert _in_child(lambda: owner.lock.acquire(timeout=2)) == "True"


def test_the_owner_is_held_weakly() -> None:
    owner = _Owner("c")
    memvault.after_fork_in_child(owner, _Owner.reset)
    survivor = _Owner("d")
    memvault.after_fork_in_child(survivor, _Owner.reset)
    del owner
    gc.collect()
    assert _in_child(lambda: survivor.resets) == "1"


def test_a_failing_reset_is_logged_and_the_others_still_run() -> None:
    first, last = _Owner("e"), _Owner("f")
    failing = _Fails()
    memvault.after_fork_in_child(first, _Owner.reset)
    memvault.after_fork_in_child(failing, _Fails.reset)
    memvault.after_fork_in_child(last, _Owner.reset)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("memvault")
    logger.addHandler(handler)
    try:
        seen = _in_child(lambda: (first.resets, last.resets, [r.exc_info[1] for r in records if r.exc_info]))
    finally:
        logger.removeHandler(handler)
    assert seen == "(1, 1, [RuntimeError('this reset fails')])"


class _SlowInTheParent:
    """A lifecycle plugin whose turn-start recall waits, in the parent process only, until released."""

    def __init__(self) -> None:
        self.parent = os.getpid()
        self.entered, self.release = threading.Event(), threading.Event()

    @memvault.hookimpl
    def memvault_recall_turn_started(self, ctx: object) -> object:
        here = "parent" if os.getpid() == self.parent else "child"
        if here == "parent":
            self.entered.set()
            self.release.wait(10)
        return {"messages": [{"content": f"remembered in the {here}"}]}


def test_a_session_forked_during_a_turn_start_goes_on_in_the_child() -> None:
    """A turn start holds the session lock while its recalls run: a fork then left it held in the child."""
    from memvault.lifecycle import Runtime, Slot

    plugin = _SlowInTheParent()
    with memvault.open("memory", plugins=[plugin]) as vault:
        slot = Slot(name="notes", description="Notes.", vault=vault, scope=lambda ctx: "s")
        session = Runtime([slot], workspace_id="w").session("s1", principal="alice")
        thread = threading.Thread(target=session.turn_started, args=(1, "hello"))
        thread.start()
        try:
            assert plugin.entered.wait(10)
            seen = _in_child(lambda: [e.content for e in session.turn_started(2, "again").records])
        finally:
            plugin.release.set()
            thread.join()
    assert seen == "['remembered in the child']"


class _Unused:
    """An embedder of the shipped intents' model (so the check by meaning is usable) that is never asked
    for a vector: the text below reaches no model."""

    name = "unused"

    def __init__(self) -> None:
        from memvault.scanner.semantic import load_intents

        intents = load_intents()
        self.model_id, self.dimensions = intents.model_id, intents.dimensions

    def embed(self, texts: object) -> object:
        raise AssertionError("not asked")


def test_the_check_by_meaning_judges_in_a_child_forked_while_a_thread_holds_its_lock() -> None:
    """Threads take the check's lock on every write (its counters and caches); a child forked at that moment
    has only the forking thread, so it must get a lock of its own, not one held for ever (P35)."""
    from memvault.scanner.semantic import SemanticCheck

    check = SemanticCheck(_Unused(), trained=False)  # type: ignore[arg-type]
    assert check.usable
    with _held_by_another_thread(check._lock):  # where a writer thread stands for a moment on every write
        assert _in_child(lambda: (check.hits("The dentist moved to Tuesday."), check.texts)) == "([], 1)"
