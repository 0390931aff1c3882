"""Layer 1: what a provider resets in a forked child (contract P35).

A vault opened before ``os.fork()`` (multiprocessing's default start method on Linux
before Python 3.14, gunicorn's ``--preload``, Celery's prefork pool) is copied into the
child with everything its provider holds, and the child uses it. Three things do not
survive the copy:

* **locks held by other threads.** The child has only the thread that forked; a lock
  another thread held at that moment stays held for ever in the child, and its first
  call that takes it waits for ever.
* **connections.** A socket copied into the child is the same connection as the
  parent's: a request sent on it can read the parent's answer (another agent's rows),
  and closing it in the child can end the parent's session.
* **threads** (a writer, a pool's workers): gone in the child.

So a provider registers a reset for itself, which runs in every child forked while the
provider is alive, before the child runs anything else:

.. code-block:: python

    class MyProvider:
        def __init__(self, ...):
            self._lock = threading.Lock()
            self._pool = make_pool()
            after_fork_in_child(self, MyProvider._forked)

        def _forked(self):
            self._lock = threading.Lock()        # a lock, not one a lost thread holds
            self._pool = make_pool()            # new connections; never close the parent's

The parity suite's ``ForkTests`` check the result: the parent and the child, each using the
vault at once, get their own answers, and nothing stalls.

May import: nothing of memvault (the standard library only).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["after_fork_in_child"]

_T = TypeVar("_T")
log = logging.getLogger("memvault")

#: (weak reference to the owner, its reset), in registration order.
_RESETS: list[tuple[weakref.ReferenceType[Any], Callable[[Any], None]]] = []
_RESETS_LOCK = threading.Lock()


def after_fork_in_child(owner: _T, reset: Callable[[_T], None]) -> None:
    """Call ``reset(owner)`` in every child process forked while ``owner`` is alive.

    ``owner`` is held weakly (registering keeps nothing alive); ``reset`` should be a plain
    function or an unbound method, not a bound method of ``owner`` (that would hold it).
    Resets run in the order they were registered; one that raises is logged and the others
    still run. Where ``os.fork`` does not exist this does nothing.
    """
    if not hasattr(os, "register_at_fork"):
        return
    with _RESETS_LOCK:
        _RESETS[:] = [(ref, fn) for ref, fn in _RESETS if ref() is not None]
        _RESETS.append((weakref.ref(owner), reset))


def _run_resets() -> None:
    global _RESETS_LOCK
    _RESETS_LOCK = threading.Lock()  # another thread may have held it at the fork
    for ref, reset in list(_RESETS):
        owner = ref()
        if owner is None:
            continue
        try:
            reset(owner)
        except Exception:
            log.exception("memvault: resetting %r after a fork failed", owner)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_run_resets)
