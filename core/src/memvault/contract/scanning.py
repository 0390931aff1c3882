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

What the model reads together is judged together. A recall's hits reach the
model side by side, so the scanner judges them as one text too:
:func:`recalled_text` is that text, the one definition of how a recall is
rendered for the scan. A write can make the model read more than the document
it lands in (a notes slot shows every note of its notebook, stored in several
documents, as one message): the writer declares that text with
:func:`rendered_view` around its retain, and the scanner judges it with the
write (:func:`current_rendered_view`).

May import: nothing of memvault (the standard library only).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterable
from typing import Final, NamedTuple

__all__ = [
    "RenderedView",
    "StoredCheck",
    "check_stored",
    "current_rendered_view",
    "current_stored_check",
    "nothing_written",
    "recalled_text",
    "rendered_view",
    "stored_check",
]

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


def nothing_written() -> None:
    """Tell the installed check that this retain writes nothing: it repeats an idempotent write (P44).

    A provider with ``checks_stored`` and ``idempotent_writes`` calls it, instead of
    :func:`check_stored`, when it answers a retain with the result recorded under its
    idempotency key: no body is written, so there is none to scan (the first write
    was). Calling it for any other retain is a bug: the write would go unscanned.
    """
    check = _CHECK.get()
    skip = getattr(check, "nothing_written", None)
    if callable(skip):
        skip()


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


# -- what the model reads together (P19, P29) ---------------------------------------------------------


def recalled_text(snippets: Iterable[str]) -> str:
    """A recall's hits as the model reads them, for the scanner: the snippets in rank order, one per line.

    The default lifecycle gives the model each hit as a message, in rank order;
    the ``search`` tool, the MCP server and the service return them as a list in
    that order. The scanner judges this text once per recall, besides each
    hit's document on its own, so an injection split across documents that one
    recall brings together is withheld (contract P19).
    """
    return "\n".join(snippets)


class RenderedView(NamedTuple):
    """What the model will read once a write lands (:func:`rendered_view`), and the part of it already seen."""

    text: str
    #: A prefix of ``text`` the model was already shown (``""``: none): a scanner that judged it clean
    #: before may rescan only what follows it and its tail.
    extends: str


_VIEW: Final[contextvars.ContextVar[RenderedView | None]] = contextvars.ContextVar(
    "memvault_rendered_view", default=None
)


class _Declared:
    """The ``with`` block :func:`rendered_view` returns."""

    __slots__ = ("_token", "_view")

    def __init__(self, view: RenderedView) -> None:
        self._view = view

    def __enter__(self) -> None:
        self._token = _VIEW.set(self._view)

    def __exit__(self, *exc: object) -> None:
        _VIEW.reset(self._token)


def rendered_view(text: str, *, extends: str = "") -> contextlib.AbstractContextManager[None]:
    """Declare, for the retains made inside the ``with`` block, what the model will read once they land.

    A writer whose documents reach the model together with other text (a notes
    slot's rendered notebook: every note, one per line, though each is stored
    apart) wraps its retain in this block; the vault's scanner then judges
    ``text`` with the write, and a ``ContentRejected`` for it refuses the write
    as for its own content (nothing written, a quarantine copy of ``text`` kept).
    ``extends``: a prefix of ``text`` the model already read (the notebook before
    a new note), which a scanner may have judged clean already.

    A scanner that does not look at it judges the write alone, as before; a
    vault whose provider scans upstream (``scans_upstream``) has no local
    scanner, so the view is not judged there.
    """
    if extends and not text.startswith(extends):
        extends = ""
    return _Declared(RenderedView(text, extends))


def current_rendered_view() -> RenderedView | None:
    """The view declared around this retain with :func:`rendered_view` (the scanner's side), or ``None``."""
    return _VIEW.get()
