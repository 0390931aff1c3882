"""When a document goes (contract P41-P43): its ``.<name>.meta`` sidecar.

A document written with an expiry (``RetainRequest.expires_at``) or under a retention policy
(``RetainRequest.retention``) gets a sidecar beside it, one JSON object::

    {"expires_at": "2026-02-01T00:00:00+00:00", "purge_at": "2026-02-01T00:00:00+00:00"}

``expires_at`` is the explicit expiry (``null`` for none), ``purge_at`` the moment the document
becomes absent for every verb: ``min(expires_at, write time + retention)``. A document without a
sidecar (every document written before expiry existed, or edited in by hand) never expires on its
own; the sweep still removes it once its last write (the file's mtime) is older than its tier's
retention.

Two files cannot change in one rename, so the sidecar is written around the document (under the
document's lock): first with the *earlier* of the old and the new ``purge_at``, then the document,
then (only when they differ) with the new one. A crash in between leaves the old or the new body
expiring at the earliest moment either write asked for: never later than a write wanted.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Final

from attrs import frozen

from memvault_local_disk import fs

__all__ = ["META_SUFFIX", "Meta", "earliest", "meta_name", "read_meta", "write_meta"]

META_SUFFIX: Final = ".meta"


def meta_name(name: str) -> str:
    """The sidecar of document ``name`` (dot-prefixed: invisible to recall)."""
    return f".{name}{META_SUFFIX}"


@frozen(kw_only=True)
class Meta:
    """A document's expiry: the explicit one and the effective one (either may be ``None``)."""

    expires_at: dt.datetime | None = None
    purge_at: dt.datetime | None = None

    def expired(self, now: dt.datetime) -> bool:
        """Whether the document is absent at ``now`` (P41: from the moment it expires)."""
        return self.purge_at is not None and self.purge_at <= now

    def encode(self) -> bytes:
        return json.dumps(
            {"expires_at": _iso(self.expires_at), "purge_at": _iso(self.purge_at)}, separators=(",", ":")
        ).encode("ascii")


NONE: Final = Meta()


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.astimezone(dt.timezone.utc).isoformat()


def _parse(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    parsed = dt.datetime.fromisoformat(value)
    return parsed if parsed.utcoffset() is not None else parsed.replace(tzinfo=dt.timezone.utc)


def earliest(*moments: dt.datetime | None) -> dt.datetime | None:
    """The earliest of the moments given (``None`` stands for "never")."""
    found = [m for m in moments if m is not None]
    return min(found) if found else None


def read_meta(handle: fs.DirHandle, name: str) -> Meta:
    """The sidecar of document ``name``; :data:`NONE` when there is none.

    A sidecar that is not JSON (edited by hand) reads as none: its document does not expire on its
    own, and the sweep still removes it by its tier's retention.
    """
    found = fs.read_file(handle, meta_name(name))
    if found is None:
        return NONE
    try:
        data = json.loads(found[0])
        if not isinstance(data, dict):
            return NONE
        return Meta(expires_at=_parse(data.get("expires_at")), purge_at=_parse(data.get("purge_at")))
    except ValueError:
        return NONE


def write_meta(handle: fs.DirHandle, name: str, meta: Meta) -> None:
    """Write (or, for a document that never expires, remove) the sidecar; the caller holds the lock."""
    if meta == NONE:
        fs.remove_file(handle, meta_name(name))
    else:
        fs.write_atomic(handle, meta_name(name), meta.encode())
