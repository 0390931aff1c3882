"""Idempotency keys (contract P44, P45): ``<root>/<workspace>/.idempotency/<sha256 of the key>.json``.

A key's record holds the fingerprint of the write that first used it, its result and when it was
recorded. A write with a key runs under the key's lock (``flock`` on a sentinel in that folder,
across threads and processes) and then its document's lock, always in that order.

The record and the document are two files, and no rename changes two files at once. So a write
with a key keeps a journal entry beside its document, ``.<name>.pending``, written before the
document and removed after the record:

1. ``.<name>.pending``: the key, the fingerprint, the result, and the sha256 of the body before
   and after the write;
2. the document (atomic rename);
3. the key's record (atomic rename);
4. the journal entry goes.

Every writer and remover of the document (under its lock) first finishes a journal entry a crash
left (:func:`settle`): when the document's body is the one the entry wrote, the write happened and
its key's record is written now; otherwise it did not, and the entry just goes. So a crash between
the document and the record never makes a repeat of the write apply twice (its repeat finds the
record), and a crash before the document leaves no record, so the repeat writes once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from attrs import frozen

from memvault.contract.models import RetainResult
from memvault_local_disk import fs

__all__ = ["KEYS_DIR", "KeyFolder", "Record", "pending_name", "settle", "write_pending"]

KEYS_DIR: Final = ".idempotency"
_PENDING: Final = ".pending"


def pending_name(name: str) -> str:
    """The journal entry beside document ``name``."""
    return f".{name}{_PENDING}"


def _file(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest() + ".json"


@frozen(kw_only=True)
class Record:
    """What a key remembers: the write's fingerprint and its result."""

    key: str
    fingerprint: str
    result: RetainResult
    recorded_at: dt.datetime

    def encode(self, **extra: Any) -> bytes:
        return json.dumps(
            {
                "key": self.key,
                "fingerprint": self.fingerprint,
                "result": {"id": self.result.id, "bytes": self.result.bytes, "warning": self.result.warning},
                "recorded_at": self.recorded_at.astimezone(dt.timezone.utc).isoformat(),
                **extra,
            },
            separators=(",", ":"),
        ).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> tuple[Record, dict[str, Any]] | None:
        """The record and the whole object; ``None`` for a file that is not one (edited by hand)."""
        try:
            raw = json.loads(data)
            result = raw["result"]
            record = cls(
                key=str(raw["key"]),
                fingerprint=str(raw["fingerprint"]),
                result=RetainResult(id=result["id"], bytes=result["bytes"], warning=result["warning"]),
                recorded_at=dt.datetime.fromisoformat(raw["recorded_at"]),
            )
        except (ValueError, KeyError, TypeError):
            return None
        return record, raw


class KeyFolder:
    """The ``.idempotency`` folder of one workspace. ``OSError`` is raised as is."""

    def __init__(self, root: Path, workspace: str) -> None:
        self.root = root
        self.workspace = workspace

    @contextlib.contextmanager
    def handle(self, *, create: bool) -> Iterator[fs.DirHandle | None]:
        with fs.open_private_dir(self.root, self.workspace, KEYS_DIR, create=create) as handle:
            yield handle

    @staticmethod
    @contextlib.contextmanager
    def lock(handle: fs.DirHandle, key: str) -> Iterator[None]:
        """Hold ``key`` against every other writer with it (threads and processes); take it before the
        document's lock, never while holding one (``outer``: the two never share a thread lock)."""
        with fs.document_lock(handle, _file(key), outer=True):
            yield

    @staticmethod
    def get(handle: fs.DirHandle, key: str) -> Record | None:
        found = fs.read_file(handle, _file(key))
        decoded = None if found is None else Record.decode(found[0])
        return None if decoded is None or decoded[0].key != key else decoded[0]

    @staticmethod
    def put(handle: fs.DirHandle, record: Record) -> None:
        fs.write_atomic(handle, _file(record.key), record.encode())

    def forget_before(self, before: dt.datetime, *, dry_run: bool) -> int:
        """Remove the records made before ``before`` (each under its key's lock); how many."""
        removed = 0
        with self.handle(create=False) as handle:
            if handle is None:
                return 0
            with os.scandir(handle.fd) as entries:
                names = sorted(e.name for e in entries if e.name.endswith(".json") and not e.name.startswith("."))
            for name in names:
                with fs.document_lock(handle, name, outer=True):  # the key's lock, as KeyFolder.lock takes it
                    found = fs.read_file(handle, name)
                    decoded = None if found is None else Record.decode(found[0])
                    if decoded is None or decoded[0].recorded_at > before:
                        continue
                    removed += 1
                    if not dry_run:
                        fs.remove_file(handle, name)
                        fs.remove_file(handle, fs.lock_name(name))
                if not dry_run:
                    os.fsync(handle.fd)
        return removed


def write_pending(handle: fs.DirHandle, name: str, record: Record, *, before: str, after: str) -> None:
    """Step 1: the journal entry of a write with a key (the caller holds both locks)."""
    fs.write_atomic(handle, pending_name(name), record.encode(before=before, after=after))


def settle(handle: fs.DirHandle, name: str, keys: KeyFolder) -> None:
    """Finish the journal entry a crashed write with a key left beside document ``name`` (under its lock).

    The write happened when the document's body is the one it wrote (its sha256 is the entry's
    ``after``): its key's record is written now, unless one exists. Otherwise it never reached the
    document, and nothing of it is kept.
    """
    found = fs.read_file(handle, pending_name(name))
    if found is None:
        return
    decoded = Record.decode(found[0])
    if decoded is not None:
        record, raw = decoded
        body = fs.read_file(handle, name)
        digest = hashlib.sha256(body[0]).hexdigest() if body is not None else ""
        if digest == raw.get("after"):
            with keys.handle(create=True) as key_handle:
                assert key_handle is not None
                if KeyFolder.get(key_handle, record.key) is None:
                    KeyFolder.put(key_handle, record)
    fs.remove_file(handle, pending_name(name))
