"""Layer 1: the check a provider runs on the stored body inside its own write (P29, ``checks_stored``).

An ``append`` is scanned as its *final* body, the stored body plus the new
content, so that an injection split across the boundary (half already stored,
half in the new content) cannot slip through. A scanner that wraps the provider
cannot see the stored body without reading it back through the provider, which
costs a whole read per append and races with other writers between the read and
the write. A provider that declares :data:`~memvault.contract.models.Capability.CHECKS_STORED`
hands the stored body to the scanner inside its own write instead:

.. code-block:: python

    with self._write_lock:                      # or the write transaction
        stored = ...                            # the body this append extends ("" if none)
        check_stored(stored, stored_digest)     # may raise ContentRejected: write nothing
        ...                                     # write stored + request.content

:func:`check_stored` runs the check the scanner installed for this call with
:func:`stored_check` (a :class:`contextvars.ContextVar`, so it belongs to the
one retain being served, in its thread or task), and does nothing when none is
installed: the scanner is off, the write is a ``replace``, or the vault did not
ask. A provider that writes on another thread takes the check with
:func:`current_stored_check` in the thread that received the retain. When the
check raises (:class:`~memvault.contract.errors.ContentRejected`), the provider
must let the exception through unchanged and write nothing: roll the
transaction back, leave the file as it was, add no data-subject tag.

May import: nothing of memvault (the standard library only).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable
from typing import Final

__all__ = ["StoredCheck", "check_stored", "current_stored_check", "stored_check"]

#: What a scanner installs: called with the stored body and its sha256 ("" when the provider has none at hand).
StoredCheck = Callable[[str, str], None]

_CHECK: Final[contextvars.ContextVar[StoredCheck | None]] = contextvars.ContextVar(
    "memvault_stored_check", default=None
)


def check_stored(body: str, digest: str = "") -> None:
    """Check the stored body an ``append`` is about to extend (capability ``checks_stored``).

    Call it inside the retain hook, after reading the stored body under the
    write lock or in the write transaction, and before writing anything; for a
    document that does not exist yet, with ``""``. ``digest`` is the body's
    sha256 (:func:`~memvault.contract.models.body_sha256`) when the provider
    keeps it; pass ``""`` rather than computing it. The scanner trusts it:
    it finds the body's cached verdict by it, and continues the sha256 it
    kept for that body to get the final body's digest. Calling it for a
    ``replace`` is harmless (no check is installed for one).

    :raises ContentRejected: when the final body (``body`` plus the request's
        content) fails the scan; let it propagate and write nothing.
    """
    check = _CHECK.get()
    if check is not None:
        check(body, digest)


def _no_check(body: str, digest: str) -> None:
    """The check when none is installed: nothing to do."""


def current_stored_check() -> StoredCheck:
    """The check installed for this call (a no-op when none is), to call later or on another thread.

    :func:`check_stored` looks the check up in the calling context. A provider
    that performs the write on another thread (a group-commit leader, a worker
    pool) takes it here, in the thread that received the retain, and calls it
    there with the same arguments and the same duty: before writing anything,
    and a rejection aborts that one write.
    """
    return _CHECK.get() or _no_check


class _Installed:
    """The ``with`` block :func:`stored_check` returns (a class, not a generator: it runs on every append)."""

    __slots__ = ("_check", "_token")

    def __init__(self, check: StoredCheck) -> None:
        self._check = check

    def __enter__(self) -> None:
        self._token = _CHECK.set(self._check)

    def __exit__(self, *exc: object) -> None:
        _CHECK.reset(self._token)


def stored_check(check: StoredCheck) -> contextlib.AbstractContextManager[None]:
    """Install ``check`` for the provider calls made inside the ``with`` block (the scanner's side)."""
    return _Installed(check)
