"""The memory provider's health tells a busy store from a stuck call (contract P25, P26).

A call holds the store's lock for microseconds; on a loaded machine a thread the
scheduler put aside can hold it far longer. Health waited 100 ms for the lock and
then reported a stuck call: the parity test of health under load flaked (1 probe
in 120). It now waits ``stuck_after`` seconds (5 by default).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import memvault


@pytest.fixture
def vault() -> Iterator[memvault.Vault]:
    with memvault.open("memory", scanner="off", embedder="off") as v:
        yield v


def _hold(lock: threading.Lock, seconds: float) -> threading.Thread:
    """Hold ``lock`` for ``seconds`` on another thread (a call the scheduler put aside); returns once held."""
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
    thread = _hold(vault.provider._lock, 0.4)  # type: ignore[attr-defined]
    try:
        status = vault.health()
    finally:
        thread.join()
    assert status.ok, status.message


def test_a_call_holding_the_lock_past_stuck_after_is_reported_p26(vault: memvault.Vault) -> None:
    vault.provider.stuck_after = 0.2  # type: ignore[attr-defined]
    thread = _hold(vault.provider._lock, 1.0)  # type: ignore[attr-defined]
    time.sleep(0.3)  # the call has now held the lock past stuck_after
    try:
        started = time.monotonic()
        status = vault.health()
        waited = time.monotonic() - started
    finally:
        thread.join()
    assert not status.ok
    assert "stuck call" in status.message
    assert waited < 0.5  # within the health deadline, not when the call ends
    assert vault.health().ok  # and ok again once the call is done
