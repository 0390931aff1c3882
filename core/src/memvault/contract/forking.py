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
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["after_fork_in_child"]

_T = TypeVar("_T")
log = logging.getLogger("memvault")

#: id(owner) -> (weak reference to the owner, its reset), in registration order; an entry leaves
#: when its owner is collected (the reference's callback), so registering stays O(1).
_RESETS: dict[int, tuple[weakref.ReferenceType[Any], Callable[[Any], None]]] = {}


def after_fork_in_child(owner: _T, reset: Callable[[_T], None]) -> None:
    """Call ``reset(owner)`` in every child process forked while ``owner`` is alive.

    ``owner`` is held weakly (registering keeps nothing alive); ``reset`` should be a plain
    function or an unbound method, not a bound method of ``owner`` (that would hold it).
    Resets run in the order they were registered; one that raises is logged and the others
    still run. Registering an owner again replaces its reset. Where ``os.fork`` does not
    exist this does nothing.
    """
    if not hasattr(os, "register_at_fork"):
        return
    key = id(owner)
    _RESETS.pop(key, None)
    _RESETS[key] = (weakref.ref(owner, lambda _ref: _RESETS.pop(key, None)), reset)


def _run_resets() -> None:
    for ref, reset in list(_RESETS.values()):
        owner = ref()
        if owner is None:
            continue
        try:
            reset(owner)
        except Exception:  # one failed reset must not leave the others undone
            log.exception("memvault: resetting %r after a fork failed", owner)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_run_resets)
