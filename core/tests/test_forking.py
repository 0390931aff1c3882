"""``memvault.after_fork_in_child``: resets that run in a forked child (contract P35)."""

from __future__ import annotations

import gc
import logging
import os
import threading

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
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as fh:
        return fh.read().decode()


def test_a_reset_runs_in_the_child_and_not_in_the_parent() -> None:
    owner = _Owner("a")
    memvault.after_fork_in_child(owner, _Owner.reset)
    assert _in_child(lambda: owner.resets) == "1"
    assert owner.resets == 0


def test_a_lock_held_by_another_thread_at_the_fork_is_free_in_the_child() -> None:
    owner = _Owner("b")
    memvault.after_fork_in_child(owner, _Owner.reset)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with owner.lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(10)
        assert _in_child(lambda: owner.lock.acquire(timeout=2)) == "True"
    finally:
        release.set()
        thread.join()


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
