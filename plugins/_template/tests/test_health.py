"""The template's health tells a busy store from a stuck call (contract P25, P26).

Health waited 100 ms for the store's lock, then reported a failure: on a loaded
machine, a thread the scheduler put aside holds the lock that long now and then,
and the parity test of health under load flaked. It now waits ``stuck_after``
seconds (5 by default). A copy of the template inherits the right probe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import memvault

NAME = "template-provider"


@pytest.fixture
def vault() -> Iterator[memvault.Vault]:
    with memvault.open(NAME, scanner="off") as v:
        yield v


def _hold(lock: threading.Lock, seconds: float) -> threading.Thread:
    held = threading.Event()

    def run() -> None:
        with lock:
            held.set()
            time.sleep(seconds)

    thread = threading.Thread(target=run)
    thread.start()
    held.wait()
    return thread


def test_a_call_holding_the_lock_for_a_while_is_busy_not_stuck_p25(vault: memvault.Vault) -> None:
    thread = _hold(vault.provider._guard, 0.4)  # type: ignore[attr-defined]
    try:
        status = vault.health()
    finally:
        thread.join()
    assert status.ok, status.message


def test_a_call_holding_the_lock_past_stuck_after_is_reported_p26(vault: memvault.Vault) -> None:
    vault.provider.stuck_after = 0.2  # type: ignore[attr-defined]
    thread = _hold(vault.provider._guard, 1.0)  # type: ignore[attr-defined]
    time.sleep(0.3)  # the call has now held the lock past stuck_after
    try:
        status = vault.health()
    finally:
        thread.join()
    assert not status.ok
    assert "over 0.2 s" in status.message
    assert vault.health().ok
