"""The background retry of pending erasures (contract P24): one daemon thread per provider.

An erasure whose table files could not be rewritten at once stays recorded in the ``erasures``
table. :class:`RetryLoop` calls the provider's round after a pause that starts at the provider's
``erase_retry_interval`` and doubles after every round that leaves something pending, up to
:data:`ERASE_RETRY_CAP`; it ends when a round finds nothing pending, and when the provider closes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final

from memvault.contract.errors import MemvaultError

__all__ = ["ERASE_RETRY_CAP", "RetryLoop"]

log = logging.getLogger("memvault_postgres.provider")

#: The longest pause, in seconds, between two background rounds (unless the first pause is longer).
ERASE_RETRY_CAP: Final = 60.0


class RetryLoop:
    """Calls ``attempt`` in a daemon thread, with growing pauses, until it reports nothing pending.

    ``attempt`` returns ``True`` when nothing is pending any more (the thread ends), ``False`` to
    be called again after the next pause, ``None`` to give up for good (it said why: later kicks
    start nothing). An exception it raises is logged, once per round, and the round counts as
    ``False``; nothing is logged once :meth:`stop` was called.
    """

    def __init__(self, attempt: Callable[[], bool | None], *, interval: float, name: str) -> None:
        self._attempt = attempt
        self.interval = interval
        self.cap = max(interval, ERASE_RETRY_CAP)
        self._name = name
        self._lock = threading.Lock()
        #: Set by :meth:`kick` (``again``) to start the pauses over, and by :meth:`stop`.
        self._wake = threading.Event()
        self._stopping = False
        self._gave_up = False
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def kick(self, *, again: bool = False) -> None:
        """Start the thread unless it runs; with ``again`` (a new erasure was recorded) a running
        thread starts its pauses over from the first."""
        with self._lock:
            if self._stopping or self._gave_up:
                return
            if self._thread is None:
                self._wake.clear()
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            elif again:
                self._wake.set()

    def stop(self, wait: float) -> bool:
        """No more rounds; wait up to ``wait`` seconds for a round in progress. Idempotent.

        :return: whether the thread has ended.
        """
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._wake.set()
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(wait)
        return not thread.is_alive()

    def _loop(self) -> None:
        pause = self.interval
        while True:
            if self._wake.wait(pause):
                if self._stopping:
                    return
                self._wake.clear()  # a new erasure: start the pauses over
                pause = self.interval
                continue
            try:
                outcome = self._attempt()
            except Exception as exc:  # keep the loop, and say it once a round (a traceback only for a bug)
                if self._stopping:
                    return
                log.warning(
                    "background retry of pending erasures failed, will retry in %g s: %s",
                    min(pause * 2, self.cap),
                    exc,
                    exc_info=not isinstance(exc, MemvaultError),
                )
                outcome = False
            if self._stopping:
                return
            if outcome is None:
                with self._lock:
                    self._gave_up = True
                    self._thread = None
                return
            if outcome:
                with self._lock:
                    if not self._wake.is_set():
                        self._thread = None
                        return
                continue  # kicked while the round ran: a new erasure waits
            pause = min(pause * 2, self.cap)
