"""Layer 1: a lock that knows how long its holder has held it (contract P25, P26).

A provider's ``health`` must answer within its deadline (P26: 200 ms for a local
provider) and say ``ok`` while the store is merely busy (P25). A probe that waits
for the store's lock cannot tell the two apart by waiting alone: on a loaded
machine, a call the scheduler put aside holds a lock for longer than a probe can
wait. :class:`HeldLock` can: the probe waits a little, then asks how long the
holder has held the lock, and reports a stuck call only past a bound the provider
chooses:

.. code-block:: python

    class MyProvider:
        stuck_after = 5.0

        def __init__(self):
            self._lock = HeldLock()

        @memvault.hookimpl
        def memvault_health(self):
            if not self._lock.acquire(timeout=0.1):
                if self._lock.held_for() < self.stuck_after:
                    return HealthStatus(ok=True)  # busy is healthy
                return HealthStatus(ok=False, message="a call has held the store lock for over 5 s")
            self._lock.release()
            return HealthStatus(ok=True)

May import: nothing of memvault.
"""

from __future__ import annotations

import threading
import time

__all__ = ["HeldLock"]


class HeldLock:
    """A :class:`threading.Lock` (``with``, ``acquire``, ``release``, ``locked``) that knows since when its
    present holder has held it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if not self._lock.acquire(blocking, timeout):
            return False
        self._since = time.monotonic()
        return True

    def release(self) -> None:
        self._since = None
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def held_for(self) -> float:
        """How long the present holder has held the lock, in seconds (0 when it is free, or just taken)."""
        since = self._since
        return time.monotonic() - since if since is not None and self._lock.locked() else 0.0

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
