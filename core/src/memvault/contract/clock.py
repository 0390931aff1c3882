"""Layer 1: the one clock every expiry decision reads (contract P41-P45).

A document expires at a moment (``RetainRequest.expires_at``, or its last write
plus its tier's retention), an idempotency key is remembered for a window: each
of those decisions compares a stored time with *now*, and every provider reads
now through :func:`now` (never ``datetime.now()``, never SQL's ``now()``: a
provider on a database passes the time as a query parameter). So a test can move
time for the vault, its providers and the parity suite at once:

.. code-block:: python

    clock = ManualClock()  # starts at the real time
    with use_clock(clock):
        vault.retain(..., expires_at=clock() + timedelta(hours=1))
        clock.advance(timedelta(hours=2))
        assert vault.read(...).content == ""  # expired: absent for every verb

:func:`use_clock` is process-wide (every thread reads the override) and nests;
it is for tests and tools, never for production code, which runs on the real
time. A provider answering over a network (``Capability.REMOTE``) reads the time
of its service's process, which no override here reaches.

May import: nothing of memvault (the standard library only).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import threading
from collections.abc import Callable, Iterator
from typing import Final

__all__ = ["Clock", "ManualClock", "now", "system_clock", "use_clock"]

#: A clock: a callable returning the current time, timezone-aware.
Clock = Callable[[], _dt.datetime]


def system_clock() -> _dt.datetime:
    """The real time, in UTC."""
    return _dt.datetime.now(_dt.timezone.utc)


_LOCK: Final = threading.Lock()
_STACK: list[Clock] = []
_current: Clock = system_clock


def now() -> _dt.datetime:
    """The current time (timezone-aware, UTC): the override of :func:`use_clock`, else the real time.

    :raises ValueError: when an overriding clock returns a naive datetime (a bug in the test).
    """
    value = _current()
    if value.utcoffset() is None:
        raise ValueError(f"the clock {_current!r} returned a naive datetime: return a timezone-aware one")
    return value.astimezone(_dt.timezone.utc)


@contextlib.contextmanager
def use_clock(clock: Clock) -> Iterator[Clock]:
    """Read the time from ``clock`` in every thread until the block exits (for tests; nests).

    :param clock: returns the current time, timezone-aware (a :class:`ManualClock`, for example).
    """
    global _current
    with _LOCK:
        _STACK.append(_current)
        _current = clock
    try:
        yield clock
    finally:
        with _LOCK:
            _current = _STACK.pop()


class ManualClock:
    """A clock that moves only when told: ``clock.advance(timedelta(days=1))``. Thread-safe.

    :param start: the time it starts at (timezone-aware); default the real time now.
    """

    def __init__(self, start: _dt.datetime | None = None) -> None:
        if start is not None and start.utcoffset() is None:
            raise ValueError("ManualClock(start=...) needs a timezone-aware datetime")
        self._now = start if start is not None else system_clock()
        self._lock = threading.Lock()

    def __call__(self) -> _dt.datetime:
        with self._lock:
            return self._now

    def advance(self, delta: _dt.timedelta) -> _dt.datetime:
        """Move the clock forward by ``delta`` (negative: back); return the new time."""
        with self._lock:
            self._now = self._now + delta
            return self._now

    def set(self, when: _dt.datetime) -> None:
        """Set the clock to ``when`` (timezone-aware)."""
        if when.utcoffset() is None:
            raise ValueError("ManualClock.set needs a timezone-aware datetime")
        with self._lock:
            self._now = when

    def __repr__(self) -> str:
        return f"ManualClock({self():%Y-%m-%dT%H:%M:%S%z})"
